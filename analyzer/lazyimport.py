"""Package attributes imported on first use (PEP 562), so that importing one light submodule of a
package (``analyzer.rules.units`` for ``analyze --help``) does not import the package's heavy ones
(the rules engine, the facts registry: pandas)."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(package: str, namespace: dict[str, Any], where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: its attribute ``name`` is the attribute of that name of
    module ``where[name]`` (an absolute module name), imported on first use and then kept in the
    package's ``namespace`` (its ``globals()``)."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
