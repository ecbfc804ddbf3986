"""Package attributes imported on first use (PEP 562), so that importing one light submodule of a
package (``analyzer.rules.units`` for ``analyze --help``) does not import the package's heavy ones
(the rules engine, the facts registry: pandas).

A package using it imports its names for type checkers only and defines the module ``__getattr__`` only
at run time (``if not TYPE_CHECKING:``): a module ``__getattr__`` that mypy sees makes every attribute of
the package, typos included, type-check as ``Any``."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(package: str, namespace: dict[str, Any], where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: its attribute ``name`` is the attribute of that name of
    module ``where[name]`` (an absolute module name), imported on first use and then kept in the
    package's ``namespace`` (its ``globals()``).

    An AttributeError raised while that module is imported (a bug in it, or in something it imports) is
    raised as an ImportError naming the module: raised from ``__getattr__`` as it is, Python would read it
    as "no such attribute" (``from package import name`` then says only "cannot import name", ``hasattr``
    says False, and the real error is lost)."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            loaded = importlib.import_module(module)
        except AttributeError as exc:
            raise ImportError(f"importing {module} (for {package}.{name}) failed: {type(exc).__name__}: {exc}",
                              name=module) from exc
        try:
            value = getattr(loaded, name)
        except AttributeError as exc:  # the package's table names the wrong module
            raise ImportError(f"{package}.{name} is listed in {module}, which has no {name!r}",
                              name=module) from exc
        namespace[name] = value
        return value

    return __getattr__
