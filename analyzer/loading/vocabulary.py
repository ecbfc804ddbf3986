"""The words a report uses for the platform a trace was recorded on.

The facts and the rules speak CUDA: the facts classify a HIP (ROCm) call by its CUDA equivalent
(:func:`analyzer.loading.api_names.cuda_equivalent`, so ``hipMemcpyWithStream`` is a ``cudaMemcpy``), and
the rule texts say "CUDA graph", "SMs", "`cudaStreamSynchronize`". On an AMD GPU that is wrong twice: the
trace recorded HIP calls, and the GPU has compute units. One :class:`Vocabulary` per trace
(:func:`vocabulary_of`, from :attr:`TraceInfo.platform <analyzer.loading.model.TraceInfo.platform>`) says
it the trace's way, in two strengths:

- :meth:`Vocabulary.text` rewrites what the analyzer wrote (rule titles, messages and their templates,
  explanations, column headers): call names become the calls the trace recorded (else their HIP
  mirror), "CUDA" becomes "HIP", "NCCL" "RCCL", "SM(s)" "compute unit(s)", "warp(s)" "wavefront(s)",
  "Tensor Cores" "Matrix Cores". URLs and code other than call names (``torch.cuda.CUDAGraph``,
  ``nsys --cuda-...``, ``PYTORCH_CUDA_ALLOC_CONF``, ``NCCL_DEBUG``: RCCL reads the same variables) are
  kept: they are what the user types on either platform; the ``nvidia-smi`` commands the texts give
  become their ``rocm-smi`` counterparts (:data:`_COMMANDS`).
- :meth:`Vocabulary.values` rewrites what came from the trace through the facts (a breakdown label,
  an evidence cell): only the CUDA names the facts gave to calls the trace recorded under HIP names,
  so a kernel or NVTX name is never reworded.

On a CUDA trace both return their input unchanged. A multi-GPU job speaks its ranks' words
(:func:`job_vocabulary`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Iterable
from typing import TYPE_CHECKING

import pandas as pd

from analyzer.loading.api_names import HIP_TO_CUDA, cuda_equivalent
from analyzer.loading.common import strip_api_suffix

if TYPE_CHECKING:
    from analyzer.loading.model import Trace

CUDA = "cuda"
ROCM = "rocm"

#: a CUDA runtime (``cudaStreamSynchronize``) or driver (``cuLaunchKernel``) call name; not a part of a
#: longer name or path (``torch.cuda.synchronize``, ``--cuda-graph-trace``) and not a library
#: (``cuBLAS``, ``cuDNN``: a second capital)
_CALL = re.compile(r"(?<![\w.\-/#=])(?:cuda[A-Z]\w*|cu[A-Z][a-z]\w*)(?P<family>\*?)")
#: what is never reworded: URLs, and code spans (in which only call names change)
_KEEP = re.compile(r"https?://[^\s)\]>\"'`]+|`[^`\n]*`")
#: the analyzer's CUDA words and AMD's, in order (case-sensitive; the first that matches wins)
_WORDS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), r) for p, r in (
    (r"\bCUDA cores\b", "stream processors"),
    (r"\b([Tt])ensor ([Cc])ores?\b", ""),  # case kept: see _word
    # not torch.profiler's ProfilerActivity.CUDA ("CPU and CUDA activities"), the name on ROCm too
    (r"(?<![.\w])CUDA\b(?! Occupancy Calculator| activit)", "HIP"),
    (r"(?<![.\w])NCCL\b", "RCCL"),  # not NCCL_DEBUG (a variable RCCL reads too), not ncclAllReduce
    (r"\ban SM\b", "a compute unit"),
    (r"\bAn SM\b", "A compute unit"),
    (r"\bSMs\b", "compute units"),
    (r"\bSM\b", "compute unit"),
    (r"\bwarps\b", "wavefronts"),
    (r"\bwarp\b", "wavefront"),
))
_ANY_WORD = re.compile("|".join(f"(?:{p.pattern})" for p, _ in _WORDS))
#: the NVIDIA tools the rules' fixes name in code spans, and what does the same on ROCm (the rest of a
#: span is kept); a ``nvidia-smi`` command not listed becomes plain ``rocm-smi``
_COMMANDS: tuple[tuple[str, str], ...] = (
    ("nvidia-smi topo -m", "rocm-smi --showtopo"),
    ("nvidia-smi -q -d PERFORMANCE", "rocm-smi --showclocks --showtemp"),
)
_SMI = re.compile(r"nvidia-smi(?: [^`]*)?")

#: driver calls whose HIP mirror is not ``cu`` -> ``hip`` (the first HIP call :data:`HIP_TO_CUDA` maps to
#: each): ``cuLaunchKernel`` -> ``hipModuleLaunchKernel``
_DRIVER_MIRROR: dict[str, str] = {}
for _hip, _cuda in HIP_TO_CUDA.items():
    if not _cuda.startswith("cuda"):
        _DRIVER_MIRROR.setdefault(_cuda, _hip)


def hip_mirror(name: str) -> str:
    """The HIP call a CUDA call name stands for where the trace did not record one: ``cudaX`` ->
    ``hipX``, a driver call by :data:`_DRIVER_MIRROR` else ``cuX`` -> ``hipX``."""
    if name.startswith("cuda"):
        return "hip" + name[4:]
    return _DRIVER_MIRROR.get(name) or "hip" + name[2:]


def _word(match: re.Match[str]) -> str:
    text = match.group(0)
    for pattern, replacement in _WORDS:
        m = pattern.fullmatch(text)
        if m is None:
            continue
        if not replacement:  # tensor core(s) -> matrix core(s), each word's capital kept
            return ("M" if m.group(1) == "T" else "m") + "atrix " + text[len("tensor "):]
        before = match.string[:match.start()].rstrip(" ")
        if not before or before[-1] in ".!?":  # a header ("SM count") or a sentence begins with it
            return replacement[:1].upper() + replacement[1:]
        return replacement
    return text


@dataclass(frozen=True)
class Vocabulary:
    """How one trace names the platform's parts (see the module's docstring). ``recorded``: (CUDA name the
    facts use, the name(s) the trace recorded for it, ``/``-joined), sorted."""

    platform: str = CUDA
    recorded: tuple[tuple[str, str], ...] = ()

    @property
    def rocm(self) -> bool:
        return self.platform == ROCM

    @property
    def api(self) -> str:
        """The runtime's name: ``CUDA`` or ``HIP``."""
        return "HIP" if self.rocm else "CUDA"

    def call(self, name: str) -> str:
        """A CUDA call name as this trace names it: the HIP call(s) it recorded for it, else the HIP
        mirror (on ROCm); unchanged on CUDA."""
        if not self.rocm:
            return name
        return dict(self.recorded).get(name) or hip_mirror(name)

    def values(self, text: str) -> str:
        """``text`` (from the trace, through the facts) with the CUDA names the facts gave to calls this
        trace recorded under other names put back; nothing else changes."""
        if not self.recorded or "cu" not in text:
            return text
        names = dict(self.recorded)
        return _CALL.sub(lambda m: names.get(m.group(0), m.group(0)), text)

    def _named(self, match: re.Match[str]) -> str:
        """A call name matched in the analyzer's text; ``cudaMemcpy*`` (a family) by its HIP mirror."""
        if match.group("family"):
            return hip_mirror(match.group(0)[:-1]) + "*"
        return self.call(match.group(0))

    def text(self, text: str) -> str:
        """``text`` (written by the analyzer) in this platform's words; unchanged on CUDA."""
        if not self.rocm or not text:
            return text
        out, last = [], 0
        for keep in _KEEP.finditer(text):
            out.append(self._prose(text[last:keep.start()]))
            span = keep.group(0)
            out.append(_CALL.sub(self._named, _command(span)) if span.startswith("`") else span)
            last = keep.end()
        out.append(self._prose(text[last:]))
        return "".join(out)

    def _prose(self, text: str) -> str:
        return _ANY_WORD.sub(_word, _CALL.sub(self._named, text))


def _command(span: str) -> str:
    """A code span with the ``nvidia-smi`` command in it as ROCm's ``rocm-smi`` does it."""
    if "nvidia-smi" not in span:
        return span
    for cuda, rocm in _COMMANDS:
        if cuda in span:
            return span.replace(cuda, rocm)
    return _SMI.sub("rocm-smi", span)


CUDA_WORDS = Vocabulary()


def job_vocabulary(words: Iterable[Vocabulary]) -> Vocabulary:
    """The words of a job whose ranks' traces speak ``words`` (one each): ROCm's when every rank was
    recorded on ROCm, with every HIP name the ranks recorded for a CUDA call; :data:`CUDA_WORDS`
    otherwise (a job of CUDA ranks, or of both: the analyzer's own words)."""
    words = list(words)
    if not words or not all(w.rocm for w in words):
        return CUDA_WORDS
    recorded: dict[str, set[str]] = {}
    for w in words:
        for cuda, names in w.recorded:
            recorded.setdefault(cuda, set()).update(names.split("/"))
    return Vocabulary(ROCM, tuple(sorted((c, "/".join(sorted(h))) for c, h in recorded.items())))


def platform_of(trace: Trace) -> str:
    """:attr:`TraceInfo.platform` where the loader set it, else ``rocm`` when the trace recorded HIP calls
    or names an AMD GPU, ``cuda`` otherwise."""
    said = getattr(trace.info, "platform", "")
    if said in (CUDA, ROCM):
        return said
    if any(n.startswith("hip") for n in _api_names(trace)):
        return ROCM
    names = trace.gpus["name"].astype(str) if "name" in trace.gpus else ()
    return ROCM if any(w in n for n in names for w in ("AMD", "Instinct", "Radeon")) else CUDA


def vocabulary_of(trace: Trace) -> Vocabulary:
    """The :class:`Vocabulary` of ``trace``: :data:`CUDA_WORDS` on CUDA, on ROCm with the HIP names of the
    calls it recorded (kept on the trace object: one pass over its distinct API names)."""
    platform = platform_of(trace)
    if platform != ROCM:
        return CUDA_WORDS
    known = getattr(trace, "_vocabulary", None)
    if isinstance(known, Vocabulary):
        return known
    recorded: dict[str, set[str]] = {}
    for raw in _api_names(trace):
        name = strip_api_suffix(raw)
        cuda = cuda_equivalent(name)
        if cuda != name:
            recorded.setdefault(cuda, set()).add(name)
    words = Vocabulary(ROCM, tuple(sorted((c, "/".join(sorted(h))) for c, h in recorded.items())))
    try:
        object.__setattr__(trace, "_vocabulary", words)
    except (AttributeError, TypeError):  # a trace type without attributes of its own: computed each time
        pass
    return words


def _api_names(trace: Trace) -> list[str]:
    """The distinct API call names ``trace`` recorded, as written."""
    api = trace.api
    if not len(api) or "name" not in api:
        return []
    column = api["name"]
    labels = column.cat.categories if isinstance(column.dtype, pd.CategoricalDtype) else column.dropna().unique()
    return [str(n) for n in labels]
