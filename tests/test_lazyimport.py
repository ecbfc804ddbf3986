"""analyzer.lazyimport: a lazily exported name whose module fails to import says why. An AttributeError
raised while the module is imported would otherwise read as "no such attribute" (``from pkg import
name``: "cannot import name", ``hasattr``: False) and the real error would be lost. The package here is
a throwaway one written for the test (it is the mechanism under test, not evidence about a trace)."""
from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

INIT = textwrap.dedent("""
    from analyzer.lazyimport import lazy_attributes
    __all__ = ["good", "broken", "misplaced"]
    __getattr__ = lazy_attributes(__name__, globals(), {
        "good": __name__ + ".fine", "broken": __name__ + ".bad", "misplaced": __name__ + ".fine"})
""")


@pytest.fixture
def package(tmp_path, monkeypatch):
    name = "lazy_probe_pkg"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text(INIT)
    (root / "fine.py").write_text("good = 42\n")
    # a bug at import time that raises AttributeError (an attribute the module's code misspells)
    (root / "bad.py").write_text("import os\nbroken = os.no_such_function()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module(name)
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]


def test_lazy_name_resolves_and_is_kept(package):
    assert package.good == 42
    assert "good" in vars(package)  # kept: the next access does not go through __getattr__
    assert not hasattr(package, "no_such_name")


def test_attribute_error_inside_the_import_names_its_cause(package):
    with pytest.raises(ImportError, match=r"importing lazy_probe_pkg\.bad .*failed: AttributeError: .*no_such_function"):
        package.broken  # noqa: B018 - the access is the test
    with pytest.raises(ImportError, match=r"no_such_function"):
        exec("from lazy_probe_pkg import broken", {})  # noqa: S102 - a fixed import statement
    with pytest.raises(ImportError, match="no_such_function"):
        hasattr(package, "broken")  # an error in the module is not "no such attribute"


def test_a_name_listed_in_the_wrong_module_says_so(package):
    with pytest.raises(ImportError, match=r"lazy_probe_pkg\.misplaced is listed in lazy_probe_pkg\.fine"):
        package.misplaced  # noqa: B018


@pytest.mark.parametrize("package", ["analyzer.rules", "analyzer.facts", "analyzer.phases"])
def test_type_checkers_see_exactly_the_lazy_names(package):
    """A lazily exporting package imports its exported names for type checkers (``if TYPE_CHECKING:``)
    and defines its module ``__getattr__`` only at run time (``if not TYPE_CHECKING:``): a ``__getattr__``
    mypy sees types every attribute of the package, typos included, as Any."""
    import ast

    module = importlib.import_module(package)
    tree = ast.parse(open(module.__file__, encoding="utf-8").read())
    typed: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            typed |= {a.asname or a.name for n in ast.walk(node) if isinstance(n, ast.ImportFrom) for a in n.names}
        assigned = [t.id for n in ([node] if isinstance(node, ast.Assign) else []) for t in n.targets
                    if isinstance(t, ast.Name)]
        assert "__getattr__" not in assigned, f"{package}: __getattr__ visible to type checkers"
        if isinstance(node, ast.FunctionDef):
            assert node.name != "__getattr__", f"{package}: __getattr__ visible to type checkers"
    assert typed == set(module.__all__)
