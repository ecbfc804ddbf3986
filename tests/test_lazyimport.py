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
