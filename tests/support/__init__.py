"""Helpers shared by the tests and benchmarks: oracles, fixtures, model builders.

Nothing here is collected as a test.  ``tests/`` is on ``sys.path`` (pytest puts
the rootdir-less test folder there; benchmarks insert it), so these import as
``from support.golden import ...``.
"""
