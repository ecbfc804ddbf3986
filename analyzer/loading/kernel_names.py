"""A kernel's own function name, apart from its template arguments and parameter list: the one place that
splits a kernel name (the demangled C++ name nsys, torch.profiler and ncu record, or an Itanium-mangled
one where the profiler did not demangle, as on ROCm). The categories read :func:`split_kernel_name`; the
torch.profiler loader's short names and the Nsight Compute join read :func:`kernel_short_name`, its last
component (what nsys exports as ``shortName``).

``void tcnn::kernel_mlp_fused<(tcnn::Activation)0, __half, 64>(tcnn::Activation, ...)`` is the function
``tcnn::kernel_mlp_fused`` with the template arguments ``(tcnn::Activation)0, __half, 64``: what a kernel
*is* is in the first, the second only says how it was instantiated (a fused MLP is not an activation
kernel because one of its arguments names the activation it applies).
"""
from __future__ import annotations

import re
from functools import lru_cache

#: anonymous namespaces as nsys, torch.profiler and ncu spell them. ncu 2025.3's CSV prints the name with
#: every namespace qualifier dropped, and drops the ``at::native::<`` of ``at::native::<unnamed>::`` with
#: them, leaving an unbalanced ``unnamed>::`` (real export: ``void unnamed>::cunn_SoftMaxForwardReg<BFloat16,
#: ..., unnamed>::SoftMaxForwardEpilogue, long, 4>(T3 *, const T1 *, T5)`` where nsys has
#: ``void at::native::<unnamed>::cunn_SoftMaxForwardReg<c10::BFloat16, ..., (int)4>(...)``)
_ANON = re.compile(r"\((?:anonymous|anon) namespace\)::|<?\bunnamed>::")
_LENGTH = re.compile(r"\d{1,20}")  # an identifier's length prefix (longer prefixes are not lengths)
#: nested-name components read at most (a damaged name cannot make the walk unbounded)
_MAX_COMPONENTS = 4096
#: characters of a name that are read (the function name comes first; the rest is arguments)
_MAX_NAME = 1 << 16


#: kernels torch.compile's Inductor generates: Triton kernels named by family (``triton_poi_fused_*``
#: pointwise, ``triton_red_*`` / ``triton_per_*`` reductions, ``triton_tem_*`` templates; older releases
#: ``triton__0d1d...``). Their names are the same in nsys and torch.profiler traces.
INDUCTOR_KERNEL = re.compile(r"^triton_")


def is_inductor_kernel(name: str) -> bool:
    """Whether a kernel name is one torch.compile's Inductor generated (:data:`INDUCTOR_KERNEL`)."""
    return INDUCTOR_KERNEL.match(str(name).strip()) is not None


@lru_cache(maxsize=65536)
def split_kernel_name(name: str) -> tuple[str, str]:
    """``(function, template arguments)`` of a kernel name: the qualified function name without return
    type, template argument lists or parameter list (``at::native::vectorized_elementwise_kernel``), and
    the text of its template argument lists joined by ``", "`` (``""`` when it has none). A name that is
    not C++ (``triton_poi_fused_add_0``, ``nvjet_...``) is its own function name."""
    s = str(name).strip()[:_MAX_NAME]  # a damaged trace's 1 GB name: its head names the function
    if s.startswith("_Z"):
        return _split_mangled(s)
    s = _ANON.sub("", s)
    s = _drop_trailing_group(s, "(", ")")  # the parameter list
    out: list[str] = []
    args: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in s:
        if ch == "(" and depth == 0 and "".join(out).strip():
            break  # a parameter list the strip above did not see (a truncated name): the function is before it
        if ch == "<":
            depth += 1
            if depth == 1:
                current = []
                continue
        elif ch == ">" and depth > 0:
            depth -= 1
            if depth == 0:
                args.append("".join(current).strip())
                continue
        if depth == 0:
            out.append(ch)
        else:
            current.append(ch)
    if depth:  # unbalanced (a truncated name): keep what came before the open list
        args.append("".join(current).strip())
    function = "".join(out).strip()
    # the return type (``void``, ``enable_if<...>::type``) is what precedes the last top-level space
    if " " in function:
        function = function.rsplit(" ", 1)[1]
    return function or s, ", ".join(a for a in args if a)


def kernel_function_name(name: str) -> str:
    """The qualified function name of a kernel (see :func:`split_kernel_name`)."""
    return split_kernel_name(name)[0]


def kernel_short_name(name: str) -> str:
    """The function's own name, as Nsight Systems' ``shortName``: the last component of
    :func:`kernel_function_name`. ``void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`` ->
    ``vectorized_elementwise_kernel``; ``ampere_sgemm_128x64_nn`` stays as it is; a name left mangled
    (``_ZN19cutlass_cudnn_train6KernelI...``) gives its last identifier (``Kernel``)."""
    function = kernel_function_name(name)
    return function.rsplit("::", 1)[-1] or function  # a damaged "a::" keeps its whole name


def drop_anonymous_namespaces(name: str) -> str:
    """``name`` without anonymous-namespace qualifiers, however the tools spell them."""
    return _ANON.sub("", name)


def _drop_trailing_group(s: str, open_ch: str, close_ch: str) -> str:
    """``s`` without a balanced trailing ``(...)`` group (when it ends with one)."""
    if not s.endswith(close_ch):
        return s
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        ch = s[i]
        if ch == close_ch:
            depth += 1
        elif ch == open_ch:
            depth -= 1
            if depth == 0:
                return s[:i].rstrip() if i > 0 else s
    return s


def mangled_components(s: str) -> tuple[list[str], int, bool]:
    """The identifiers of an Itanium-mangled name's name, where they end, and whether every length prefix
    read was valid: ``_ZN3foo3barEv`` -> ``(["foo", "bar"], 11, True)``, ``_Z6kernelPf`` ->
    ``(["kernel"], 9, True)``; a length running past the name stops the walk with ``False`` (the
    identifiers before it kept).
    A nested name (``_ZN``, after its cv- and ref-qualifiers) is read up to its template arguments or its
    end, at most :data:`_MAX_COMPONENTS` identifiers; an unnested one is its first identifier alone (what
    follows is the parameter list). The one reader of mangled names for the loaders and the categories."""
    if not s.startswith("_Z"):
        return [], 0, True
    nested = s.startswith("_ZN")
    i = 3 if nested else 2
    if nested:
        while i < len(s) and s[i] in "rVKRO":
            i += 1
    parts: list[str] = []
    while len(parts) < _MAX_COMPONENTS:
        m = _LENGTH.match(s, i)
        if not m:
            break
        size = int(m.group(0))
        start = m.end()
        if size <= 0 or start + size > len(s):
            return parts, i, False
        parts.append(s[start:start + size])
        i = start + size
        if not nested:
            break
    return parts, i, True


def _split_mangled(s: str) -> tuple[str, str]:
    """An Itanium-mangled name (``_ZN7ck_tile6kentryI...EEvDpT1_``): the length-prefixed identifiers of
    its (nested) name up to the template arguments (``I``) joined by ``::``, and the rest as the
    arguments' (still mangled) text. A name it cannot read is returned whole."""
    parts, end, ok = mangled_components(s)
    if not (ok and parts):
        return s, ""
    rest = s[end:]
    args = rest[1:] if rest.startswith("I") else ""
    return "::".join(parts), args
