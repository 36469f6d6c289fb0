"""The error catalogue: every class in weightsmith.errors is raised, listed and one rule.

The check reads the source (AST), not a run: a class counts as raised when
``src`` outside errors.py raises it, calls it, or hands it to a helper that
raises it (``self.refuse(errors.ForbiddenOpcode, ...)``); a family counts when
one of its rules does.  Naming a class in ``except`` or ``isinstance`` is not
raising it.
"""

from __future__ import annotations

import ast
import inspect
import pickle
from pathlib import Path

import pytest

from weightsmith import errors as E

SRC = Path(E.__file__).resolve().parent


def _classes() -> dict[str, type]:
    return {
        n: c
        for n, c in vars(E).items()
        if inspect.isclass(c) and issubclass(c, BaseException) and c.__module__ == E.__name__
    }


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _not_raising(tree: ast.AST) -> set[int]:
    """ids of nodes that only test for a class: except clauses, isinstance/issubclass."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            skip.update(id(n) for n in ast.walk(node.type))
        elif isinstance(node, ast.Call) and _name(node.func) in ("isinstance", "issubclass"):
            skip.update(id(n) for a in node.args[1:] for n in ast.walk(a))
    return skip


def used_names(root: Path = SRC) -> set[str]:
    """Class names raised, called or passed as an argument anywhere under ``root``."""
    found: set[str] = set()
    for path in root.rglob("*.py"):
        if path == Path(E.__file__).resolve():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        skip = _not_raising(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exprs = [node.exc.func if isinstance(node.exc, ast.Call) else node.exc]
            elif isinstance(node, ast.Call):
                exprs = [node.func, *node.args, *(k.value for k in node.keywords)]
            elif isinstance(node, (ast.Tuple, ast.Dict)):
                # tables of (rule, message) that a helper raises from
                exprs = list(node.elts if isinstance(node, ast.Tuple) else node.values)
            else:
                continue
            for x in exprs:
                n = _name(x)
                if n is not None and id(x) not in skip:
                    found.add(n)
    return found


def test_every_error_class_is_raised_somewhere():
    classes = _classes()
    used = used_names() & set(classes)
    raised = {n for n in classes if any(issubclass(classes[u], classes[n]) for u in used)}
    never = sorted(set(classes) - raised)
    assert not never, f"classes in errors.py that src never raises: {never}"


def test_the_check_can_fail(tmp_path):
    # a class only caught, or only named in isinstance, is not raised
    (tmp_path / "m.py").write_text(
        "from weightsmith import errors as E\n"
        "try:\n    pass\nexcept E.DataHole:\n    pass\n"
        "isinstance(1, E.DataOverlap)\n"
        "raise E.TrailingBytes('x')\n"
    )
    got = used_names(tmp_path)
    assert "TrailingBytes" in got
    assert "DataHole" not in got and "DataOverlap" not in got


def test_every_class_is_listed_in_the_module_docstring():
    doc = E.__doc__ or ""
    missing = [n for n in _classes() if f"  {n} (" not in doc]
    assert not missing, f"not in the errors.py docstring catalogue: {missing}"


def test_a_rule_does_not_catch_another_rule():
    """A rule's bases are families (or WeightsmithError/builtins), never another rule."""
    classes = _classes()
    families = {
        c for c in classes.values() if any(o is not c and c in o.__mro__ for o in classes.values())
    }
    leaf_parents = {
        (n, b.__name__)
        for n, c in classes.items()
        for b in c.__bases__
        if b in families
        and b.__name__ not in ("WeightsmithError", "FormatError")
        and not b.__name__.endswith("Error")
    }
    assert not leaf_parents, f"rules subclassing another rule: {sorted(leaf_parents)}"


@pytest.mark.parametrize("name", ["InvalidIndex", "GGUFInvalidMagic", "UnmappedTensor"])
def test_format_errors_pickle(name):
    cls = getattr(E, name)
    err = cls("bad", path="f", field="k", offset=3, expected=1, found=2)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and str(back) == str(err)
