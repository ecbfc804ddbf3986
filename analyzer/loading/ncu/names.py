"""Kernel names as ncu and nsys spell them, normalized for the join (:func:`kernel_base_name`)."""
from __future__ import annotations

import re

from analyzer.loading.kernel_names import drop_anonymous_namespaces, kernel_short_name

# --------------------------------------------------------------------------------------------------
# Kernel names
# --------------------------------------------------------------------------------------------------

_CAST_BEFORE_NUMBER = re.compile(r"\((?:unsigned |signed )?(?:int|long|long long|short|char|bool|unsigned|"
                                 r"size_t|int64_t|uint64_t|int32_t|uint32_t)\)(?=-?\d)")
_SPACES = re.compile(r"\s+")
_QUALIFIERS = re.compile(r"\b(?:[A-Za-z_]\w*::)+")


def normalize_kernel_name(name: str) -> str:
    """A comparison key for demangled names across tools: whitespace removed, a leading ``void``
    return type dropped, C-style casts on template constants removed (nsys prints ``kernel<(int)32>``
    where ncu prints ``kernel<32>``), and namespace qualifiers and anonymous-namespace markers removed
    (ncu's CSV drops qualifiers: ``at::native::vectorized_elementwise_kernel<...,
    std::array<char *, (unsigned long)2>>`` is ``vectorized_elementwise_kernel<..., array<char *, 2>>``
    there)."""
    s = str(name).strip()
    s = s.removeprefix("void ")
    s = _CAST_BEFORE_NUMBER.sub("", s)
    s = _QUALIFIERS.sub("", drop_anonymous_namespaces(s))
    return _SPACES.sub("", s)


def kernel_base_name(name: str) -> str:
    """The bare function name: ``"void at::native::elementwise_kernel<128, 4>(int, F)"`` ->
    ``"elementwise_kernel"``; ``"enable_if<!T7, void>::type kernel<int, ...>(T13)"`` -> ``"kernel"``.
    This is what nsys exports as the short name (:func:`~analyzer.loading.kernel_names.kernel_short_name`).
    A name left mangled (``_Z...``) is kept whole: the join and the diff baselines key such kernels by
    it."""
    s = str(name).strip()
    return s if s.startswith("_Z") else kernel_short_name(s)
