"""Glue to array frameworks other than numpy (torch, ...), imported lazily.

``weightsmith.frameworks.torch`` maps safetensors dtypes to torch dtypes
through :mod:`weightsmith.dtypes` and builds tensors without copies; it
imports torch on first use only.
"""
