"""Kernel names as ncu and nsys spell them, normalized for the join (:func:`kernel_base_name`)."""
from __future__ import annotations

import re

from analyzer.loading.names import matching_open


# --------------------------------------------------------------------------------------------------
# Kernel names
# --------------------------------------------------------------------------------------------------

_CAST_BEFORE_NUMBER = re.compile(r"\((?:unsigned |signed )?(?:int|long|long long|short|char|bool|unsigned|"
                                 r"size_t|int64_t|uint64_t|int32_t|uint32_t)\)(?=-?\d)")
_SPACES = re.compile(r"\s+")
# Anonymous-namespace markers as the tools spell them. ncu 2025.3's CSV prints the name with every
# namespace qualifier dropped, and drops the ``at::native::<`` of ``at::native::<unnamed>::`` with them,
# leaving an unbalanced ``unnamed>::`` (real export: ``void unnamed>::cunn_SoftMaxForwardReg<BFloat16, ...,
# unnamed>::SoftMaxForwardEpilogue, long, 4>(T3 *, const T1 *, T5)`` where nsys has
# ``void at::native::<unnamed>::cunn_SoftMaxForwardReg<c10::BFloat16, ..., (int)4>(...)``).
_ANON_NS = re.compile(r"\(anonymous namespace\)::|<unnamed>::|\bunnamed>::")
_QUALIFIERS = re.compile(r"\b(?:[A-Za-z_]\w*::)+")


def _drop_anonymous(name: str) -> str:
    return _ANON_NS.sub("", name)


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
    s = _QUALIFIERS.sub("", _drop_anonymous(s))
    return _SPACES.sub("", s)


def _strip_trailing_group(s: str, open_ch: str, close_ch: str) -> str:
    """Remove a balanced ``open_ch ... close_ch`` group that ends ``s`` (parameters, template args)."""
    if not s.endswith(close_ch):
        return s
    i = matching_open(s, open_ch, close_ch)
    return s[:i].rstrip() if i >= 0 else s


def _after_last_top_level(s: str, sep: str) -> str:
    depth = 0
    cut = 0
    i = 0
    while i < len(s):
        ch = s[i]
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth = max(0, depth - 1)
        elif depth == 0 and s.startswith(sep, i):
            cut = i + len(sep)
            i += len(sep)
            continue
        i += 1
    return s[cut:]


def kernel_base_name(name: str) -> str:
    """The bare function name: ``"void at::native::elementwise_kernel<128, 4>(int, F)"`` ->
    ``"elementwise_kernel"``; ``"enable_if<!T7, void>::type kernel<int, ...>(T13)"`` -> ``"kernel"``.
    This is what nsys exports as the short name."""
    s = _drop_anonymous(str(name).strip())
    s = _strip_trailing_group(s, "(", ")")
    s = _strip_trailing_group(s, "<", ">")
    s = _after_last_top_level(s, " ")
    s = _after_last_top_level(s, "::")
    return s.strip() or str(name).strip()


