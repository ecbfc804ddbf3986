"""Sweep tables: many traces of one profiling campaign (model x context x mode) side by side.

``build_sweep(paths)`` loads each trace once (one at a time, so memory stays that of the largest),
keys it from its file name (``small_forward_ctx512.sqlite``, ``medium_training_ctx256.sqlite.xz``;
configurable regex with named groups) or, failing that, from NVTX texts and metadata, and builds the
tables a campaign report needs, all exact (kernels attributed to the range that launched them):

``runs``        one row per trace: key, where the key came from, measured steps, OOM evidence
``forward``     forward pass per step: CPU wall, GPU time and GPU span, mean and sample std over
                steps, whether the ranges waited for their GPU work, the forward time (``forward_ms``:
                what a timer synchronizing before and after the phase measures, from the trace; see
                :func:`~analyzer.phases.range_timing`) and what measures it, and the synchronized Python
                time when the run has one
``timing``      nsys against Python per configuration and phase (forward, backward, optimizer_step,
                step): CPU wall, GPU span, phase time, the Python timings from the run's
                ``<trace>.pytime.json`` sidecar and their ratios
``top_kernel``  the kernel with the most time per configuration (warmup excluded): count, mean, share
``training``    forward / backward / optimizer_step / residual per step: CPU and GPU ms and % of step,
                and the same by phase time (GPU span for a phase that ended before its work), with the
                residual's time in synchronizing calls (GPU catch-up at the step's final sync)
                (runs labelled forward_backward/training or holding backward/optimizer_step ranges)
``kernel_mix``  kernel category mix inside ``forward`` (count, ms, share)
``attention``   softmax vs matmul kernel time in the attention ranges, FLOP ratio and its provenance
``flags``       rows that cannot be right, with the reason

Python timings: a trace ``X.sqlite[.xz]`` may have ``X.pytime.json`` beside it (schema
``workloads.pytime/1``, written by ``workloads/transformer.py --pytime``): per phase ``n``, ``mean_ms``,
``std_ms``, ``median_ms`` of steps timed with ``torch.cuda.synchronize()`` before and after each
phase. A sidecar with ``"status": "oom"`` and no trace is a configuration that did not fit in GPU
memory: it becomes a run flagged ``stopped_early``, not a missing row. Ranges named
``python_timing`` (where the workload takes those timings) are never measured steps.

Rows that cannot be right carry the failed checks' names in every table's ``flags`` column, and one
row per reason in the ``flags`` table:
``step_shorter_than_forward`` (a step shorter than its own forward pass, or than the forward pass of
the forward-only run of the same model and context), ``no_backward`` (forward_backward/training
mode with no GPU work inside ``backward``), ``stopped_early`` (fewer measured steps than expected or
than most runs, an OOM message in NVTX, a log beside the trace or the suite's ``manifest.jsonl``),
``mode_mismatch`` (the mode label disagrees with the ranges present), ``load_error``;
``async_range`` (a forward/backward/optimizer_step range ends well before its GPU work: its CPU wall
time measures the launches; thresholds of the ``async-range-timing`` rule), ``not_monotonic`` (a
bigger model or a longer context has a shorter forward pass or step, with whether asynchronous timing
explains it: the comparison by phase time holds), ``residual_catch_up`` (a step's residual is mostly
the host waiting at the final synchronization for GPU work the phases queued), ``python_disagrees``
(the synchronized Python time and the trace's phase time differ by more than a quarter), ``missing``
(a configuration of the campaign's grid has neither a trace nor Python timings).

:func:`analyzer.phases.render.render_sweep` renders a result as Markdown, CSV files (one per table),
one self-contained HTML page (Jinja2 with autoescape: every trace string is escaped) or JSON (every
table as records).
"""
from __future__ import annotations

import lzma
import math
import re
import statistics
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer._paths import trace_stem
from analyzer.boundedio import BoundedReadError, copy_decompressed, decompressed_limit, read_regular
from analyzer.phases.sidecars import (  # noqa: F401 (PYTIME_SCHEMA, pytime_path: re-exported)
    LOG_MAX_BYTES,
    PYTIME_SCHEMA,
    PYTIME_SUFFIX,
    expand_paths,
    pytime_path,
    read_manifests,
    read_pytime,
)
from analyzer.errors import AnalyzerError, InputError, ParameterError
from analyzer.loading.model import Trace
from analyzer.facts.phase_index import MEASURE_TOLERANCE, PhaseIndex
from analyzer.facts.range_patterns import DEFAULT_EXCLUDE
from analyzer.facts.phase_table import (
    ModelConfig,
    attention_split,
    category_mix,
    kernel_categories,
    step_split,
    top_kernels,
)
from analyzer.saferegex import PatternError, compile_regex

DEFAULT_KEY_PATTERN = r"(?P<model>[^_]+)_(?P<mode>forward_backward|forward|training)_ctx(?P<context>\d+)"
MODES: tuple[str, ...] = ("forward", "forward_backward", "training")

#: Model shapes for the attention FLOP estimate when the key carries none: the presets of
#: ``workloads/transformer.py`` (the same as the CS336 assignment table the seeds use).
PRESETS: dict[str, dict[str, int]] = {
    "small": {"d_model": 768, "heads": 12, "layers": 12},
    "medium": {"d_model": 1024, "heads": 16, "layers": 24},
    "large": {"d_model": 1280, "heads": 20, "layers": 36},
    "xl": {"d_model": 1600, "heads": 25, "layers": 48},
    "2.7B": {"d_model": 2560, "heads": 32, "layers": 32},
}
#: Batch the preset note assumes when no key or config gives one (the workload's default).
PRESET_BATCH = 4
OOM_PATTERN = re.compile(r"out of (?:gpu )?memory|OutOfMemory|\bOOM\b|CUDA_ERROR_OUT_OF_MEMORY", re.IGNORECASE)
EXIT_OOM = 3  # workloads/_common.py EXIT_OOM

FLAG_CHECKS: dict[str, str] = {
    "step_shorter_than_forward": "a step shorter than a forward pass it contains (or of the same config)",
    "no_backward": "forward_backward/training mode with no GPU work launched inside backward",
    "stopped_early": "fewer measured steps than expected or than the other runs, or an OOM message",
    "mode_mismatch": "the mode label disagrees with the NVTX ranges present",
    "load_error": "the trace could not be read",
    "async_range": "a phase range ends well before its GPU work: its CPU wall time measures the launches",
    "not_monotonic": "a bigger model or a longer context is faster than a smaller/shorter one",
    "residual_catch_up": "most of a step's residual is the final sync waiting for the phases' GPU work",
    "python_disagrees": "the synchronized Python time and the trace's phase time differ by over a quarter",
    "missing": "a configuration of the sweep's grid has neither a trace nor Python timings",
}
#: Ranges the sweep never measures: the workload's Python timing reps (see ``workloads/transformer.py``).
PYTHON_TIMING_RANGES: tuple[str, ...] = ("python_timing",)
#: Phases of the ``timing`` table and their keys in a pytime sidecar.
TIMED_PHASES: tuple[str, ...] = ("forward", "backward", "optimizer_step", "step")
#: A bigger model or longer context may be this much faster before ``not_monotonic`` flags it (noise:
#: launch-bound configurations take the same time whatever their size).
MONOTONIC_TOLERANCE = 0.10
#: ``residual_catch_up``: the residual is at least this share of the step ...
CATCH_UP_MIN_RESIDUAL = 0.20
#: ... and at least this share of the residual is spent inside synchronizing calls.
CATCH_UP_MIN_SYNC = 0.50
#: ``python_disagrees``: |Python / phase time - 1| above this.
PYTHON_TOLERANCE = 0.25


# ------------------------------------------------------------------------------------------------
# keys
# ------------------------------------------------------------------------------------------------
def compile_key_pattern(pattern: str) -> Any:
    """The user's ``--key-pattern``, compiled for linear-time matching (RE2, :mod:`analyzer.saferegex`)."""
    try:
        rx = compile_regex(pattern, what="--key-pattern").compiled
    except PatternError as err:
        raise ParameterError(str(err),
                             hint=err.hint or "use named groups, e.g. (?P<model>[^_]+)_ctx(?P<context>\\d+)") from None
    if not rx.groupindex:
        raise ParameterError(f"--key-pattern {pattern!r} has no named groups",
                             hint="name the parts: (?P<model>...), (?P<mode>...), (?P<context>...)")
    return rx


def _coerce(value: str | None) -> object:
    if value is None:
        return None
    return int(value) if value.isdigit() else value


def key_from_name(path: Path | str, rx: Any) -> dict[str, object] | None:
    """Named groups of ``rx`` searched in the file name (suffixes stripped); ``None`` when no match."""
    stem = trace_stem(path)
    try:
        m = rx.search(stem)
    except UnicodeEncodeError:  # an undecodable byte in the file name
        m = rx.search(stem.encode("utf-8", "replace").decode("utf-8"))
    if not m:
        return None
    return {k: _coerce(v) for k, v in m.groupdict().items() if v is not None}


_TEXT_KEYS: tuple[tuple[str, str], ...] = (
    ("model", r"(?:--model(?:[-_]size)?|\bmodel)[=\s:]+([A-Za-z0-9.]+)"),
    ("mode", r"(?:--(?:profile[-_]type|mode)|\bmode)[=\s:]+(forward_backward|forward|training)"),
    ("context", r"(?:--context(?:[-_]length)?|\bcontext(?:_length)?|\bctx)[=\s:]*(\d+)"),
    ("batch", r"(?:--batch(?:[-_]size)?|\bbatch(?:_size)?)[=\s:]+(\d+)"),
    ("d_model", r"\bd_model[=\s:]+(\d+)"),
    ("heads", r"(?:\bnum_heads|\bheads)[=\s:]+(\d+)"),
)


def key_from_trace(trace: Trace) -> tuple[dict[str, object], str]:
    """Fallback key: ``key=value`` / ``--option value`` texts in NVTX ranges and marks, process names
    and loader metadata (``trace.extras``); the mode also from the ranges present. Returns the key
    and a description of where it came from."""
    texts: list[str] = []
    if len(trace.nvtx):
        texts += [str(t) for t in pd.unique(trace.nvtx["text"].astype(object)) if t]
    if len(trace.processes):
        texts += [str(t) for t in trace.processes["name"].astype(object) if t]
    for value in trace.extras.values():
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, Mapping):
            texts += [f"{k}={v}" for k, v in value.items()]
        elif isinstance(value, pd.DataFrame) and len(value) < 10_000:
            texts += [" ".join(map(str, row)) for row in value.astype(str).itertuples(index=False)]
    blob = "\n".join(texts)
    key: dict[str, object] = {}
    for name, pattern in _TEXT_KEYS:
        m = re.search(pattern, blob)
        if m:
            key[name] = _coerce(m.group(1))
    sources = ["nvtx/metadata"] if key else []
    if "mode" not in key:
        names = set(texts)
        mode = ("training" if "optimizer_step" in names else "forward_backward" if "backward" in names
                else "forward" if "forward" in names else None)
        if mode:
            key["mode"] = mode
            sources.append("mode from ranges")
    return key, ", ".join(sources) or "none"


# ------------------------------------------------------------------------------------------------
# per run
# ------------------------------------------------------------------------------------------------
@dataclass(eq=False)
class RunSummary:
    """What one trace contributes to the sweep (the trace itself is not kept)."""

    path: Path
    key: dict[str, object]
    key_source: str
    steps: int = 0
    range_names: frozenset[str] = frozenset()
    split: pd.DataFrame | None = None
    forward_cpu: list[int] = field(default_factory=list)  # per step (ns)
    forward_gpu: list[int] = field(default_factory=list)
    forward_span: list[int] = field(default_factory=list)  # per step: GPU span of forward's work (ns)
    forward_time: list[int] = field(default_factory=list)  # per step: phase time (what a synchronized timer measures)
    forward_count: list[int] = field(default_factory=list)  # per step: forward instances
    forward_waited: list[int] = field(default_factory=list)  # per step: of those, instances that waited
    pytime_path: Path | None = None  # the Python timings sidecar, when there is one
    python: dict[str, dict] | None = None  # its per-phase timings (ms)
    python_note: str = ""  # why a sidecar could not be used
    top: pd.DataFrame | None = None
    mix: pd.DataFrame | None = None
    attention: pd.DataFrame | None = None
    oom: str | None = None
    error: str | None = None
    flags: list[tuple[str, str]] = field(default_factory=list)  # (check, reason)

    @property
    def model(self) -> str:
        return str(self.key.get("model", trace_stem(self.path)))

    @property
    def mode(self) -> str:
        return str(self.key.get("mode", ""))

    @property
    def context(self) -> int | None:
        ctx = self.key.get("context")
        return ctx if isinstance(ctx, int) else None


def model_config_for(key: Mapping[str, object],
                     configs: Mapping[str, Mapping[str, object]] | None = None) -> ModelConfig | None:
    """Attention shapes for a run: the key's own groups, then ``configs[model]``, then :data:`PRESETS`;
    the config's ``source`` says which (and what was assumed)."""
    model = str(key.get("model", ""))
    merged: dict[str, object] = {}
    sources: list[str] = []
    preset = PRESETS.get(model)
    if preset:
        merged.update(preset)
        merged["batch"] = PRESET_BATCH
        sources.append(f"preset {model!r} of workloads/transformer.py (batch {PRESET_BATCH} assumed: "
                       "the workload default, not read from the trace)")
    if configs and model in configs:
        merged.update(configs[model])
        sources.append(f"user config for {model!r}")
    own = {k: key[k] for k in ("d_model", "heads", "batch", "context") if k in key}
    if own:
        merged.update(own)
        sources.append("file-name key " + ", ".join(f"{k}={v}" for k, v in own.items()))
    if not merged:
        return None
    return ModelConfig.from_mapping(merged, source="; ".join(sources))


def sweep_exclude(exclude: str | Iterable[str] | None) -> tuple[str, ...]:
    """``exclude`` as a tuple, plus :data:`PYTHON_TIMING_RANGES`."""
    base = () if exclude is None else (exclude,) if isinstance(exclude, str) else tuple(exclude)
    return base + tuple(p for p in PYTHON_TIMING_RANGES if p not in base)


def _python_phases(record: Mapping[str, object]) -> dict[str, dict]:
    """``{phase: {"n", "mean_ms", "std_ms", "median_ms"}}`` with numeric values only."""
    phases = record.get("phases")
    out: dict[str, dict] = {}
    if not isinstance(phases, Mapping):
        return out
    for name, stats in phases.items():
        if not isinstance(stats, Mapping):
            continue
        vals = {k: stats.get(k) for k in ("n", "mean_ms", "std_ms", "median_ms")}
        if isinstance(vals["mean_ms"], (int, float)) and not isinstance(vals["mean_ms"], bool):
            out[str(name)] = {k: float(v) if isinstance(v, (int, float)) else float("nan") for k, v in vals.items()}
    return out


def _pytime_key(record: Mapping[str, object]) -> dict[str, object]:
    config = record.get("config")
    if not isinstance(config, Mapping):
        return {}
    return {k: _coerce(str(config[k])) for k in ("model", "mode", "context", "batch", "dtype")
            if config.get(k) not in (None, "")}


def _oom_evidence(path: Path, trace: Trace | None, manifest: Mapping[str, Mapping[str, object]]) -> str | None:
    stem = trace_stem(path)
    record = manifest.get(stem)
    if record is not None:
        rc = record.get("exit_code")
        if rc == EXIT_OOM:
            return f"manifest.jsonl: {stem} exited with code {EXIT_OOM} (out of GPU memory)"
    if trace is not None and len(trace.nvtx):
        for text in pd.unique(trace.nvtx["text"].astype(object)):
            if text and OOM_PATTERN.search(str(text)):
                return f"NVTX text {str(text)[:120]!r}"
    for suffix in (".log", ".stderr", ".out", ".err", ".txt"):
        side = path.parent / f"{stem}{suffix}"
        if side.is_file():
            try:
                lines = read_regular(side, LOG_MAX_BYTES, "log").decode("utf-8", "replace").splitlines()
            except (OSError, BoundedReadError):
                continue
            for line in lines:
                if OOM_PATTERN.search(line):
                    return f"{side.name}: {line.strip()[:160]}"
    if record is not None and record.get("exit_code") not in (0, None):
        return f"manifest.jsonl: {stem} exited with code {record.get('exit_code')}"
    return None





def summarize_run(
    trace: Trace,
    path: Path,
    key: dict[str, object],
    key_source: str,
    *,
    exclude: str | Iterable[str] | None = DEFAULT_EXCLUDE,
    model_configs: Mapping[str, Mapping[str, object]] | None = None,
) -> RunSummary:
    """The per-trace part of the sweep (also usable alone). ``python_timing`` ranges are always
    excluded, besides ``exclude``."""
    exclude = sweep_exclude(exclude)
    idx = PhaseIndex.build(trace)
    cats = kernel_categories(trace)
    split = step_split(trace, exclude=exclude, index=idx)
    run = RunSummary(path=path, key=key, key_source=key_source, steps=len(split), split=split)
    run.range_names = frozenset(str(t) for t in idx.measured_ranges(exclude)["text"].astype(object))
    if len(split) and (split["forward_count"] > 0).any():
        has = split[split["forward_count"] > 0]
        run.forward_cpu = has["forward_cpu_ns"].astype(int).tolist()
        run.forward_gpu = has["forward_gpu_ns"].astype(int).tolist()
        run.forward_span = has["forward_span_ns"].astype(int).tolist()
        run.forward_time = has["forward_phase_ns"].astype(int).tolist()
        run.forward_count = has["forward_count"].astype(int).tolist()
        run.forward_waited = has["forward_waited"].astype(int).tolist()
    else:  # forward ranges outside step_N ranges: one value per instance
        measured = idx.measured_ranges(exclude)
        fwd = measured[measured["text"].astype(object) == "forward"]
        gpu = idx.instance_gpu(fwd["range_id"].to_numpy())
        timing = idx.timing(fwd, gpu)
        run.forward_cpu = fwd["duration"].astype(int).tolist()
        run.forward_gpu = gpu["gpu_ns"].astype(int).tolist()
        run.forward_span = timing["gpu_span_ns"].astype(int).tolist()
        run.forward_time = timing["phase_ns"].astype(int).tolist()
        run.forward_count = [1] * len(fwd)
        run.forward_waited = timing["waited"].astype(int).tolist()
    run.top = top_kernels(trace, exclude=exclude, n=1, index=idx, categories=cats)
    run.mix = category_mix(trace, "forward", exclude=exclude, categories=cats, index=idx)
    run.attention = attention_split(trace, model_config_for(key, model_configs), exclude=exclude,
                                    categories=cats, index=idx)
    return run


# ------------------------------------------------------------------------------------------------
# the sweep
# ------------------------------------------------------------------------------------------------
@dataclass
class SweepResult:
    """The sweep's tables (times in ms as floats at full precision; shares 0..1)."""

    runs: pd.DataFrame
    forward: pd.DataFrame
    top_kernel: pd.DataFrame
    timing: pd.DataFrame
    training: pd.DataFrame
    kernel_mix: pd.DataFrame
    attention: pd.DataFrame
    flags: pd.DataFrame
    key_pattern: str = DEFAULT_KEY_PATTERN
    summaries: list[RunSummary] = field(default_factory=list, repr=False)

    def tables(self) -> dict[str, pd.DataFrame]:
        return {"runs": self.runs, "forward": self.forward, "timing": self.timing, "top_kernel": self.top_kernel,
                "training": self.training, "kernel_mix": self.kernel_mix, "attention": self.attention,
                "flags": self.flags}


def _open_trace(path: Path, loader: Callable[[Path], Trace], tmp: Path) -> Trace:
    """Load ``path``; a ``.xz`` file the loader cannot read is decompressed into ``tmp`` first."""
    if path.suffix.lower() == ".xz":
        try:
            return loader(path)
        except AnalyzerError:
            target = tmp / path.name[: -len(".xz")]
            try:
                with lzma.open(path) as src, open(target, "wb") as dst:
                    copy_decompressed(src, dst, decompressed_limit(path.stat().st_size))
            except (lzma.LZMAError, EOFError) as err:
                target.unlink(missing_ok=True)
                raise InputError(path, f"not a valid .xz file ({err})",
                                 hint="re-download it or pass the decompressed .sqlite") from None
            except BoundedReadError as err:
                target.unlink(missing_ok=True)
                raise InputError(path, f"the .xz file {err.reason}", hint=err.hint) from None
            try:
                return loader(target)
            finally:
                target.unlink(missing_ok=True)
    return loader(path)


def _default_loader() -> Callable[[Path], Trace]:
    from analyzer.loading import load_trace  # imported late: the loader pulls in SQLite readers

    return load_trace


#: ``missing``: report absent configurations only when the runs cover at least this share of the grid
#: their models x contexts x modes span, and the grid has at least MISSING_MIN_GRID cells (a handful of
#: unrelated traces is not a grid with holes).
MISSING_MIN_COVERAGE = 0.75
MISSING_MIN_GRID = 8


def _missing_runs(runs: Sequence[RunSummary]) -> list[RunSummary]:
    """Configurations of the campaign's grid (the models x contexts x modes the runs have) with neither
    a trace nor a sidecar: a run the campaign lost (e.g. its export failed), flagged ``missing``."""
    keyed = [r for r in runs if r.model in PRESETS and r.mode in MODES and r.context is not None]
    have = {(r.model, r.mode, r.context) for r in keyed}
    models = sorted({k[0] for k in have}, key=list(PRESETS).index)
    modes = [m for m in MODES if m in {k[1] for k in have}]
    contexts = sorted({int(k[2]) for k in have if k[2] is not None})
    grid = [(m, mo, c) for m in models for mo in modes for c in contexts]
    if len(grid) < MISSING_MIN_GRID or len(have) < MISSING_MIN_COVERAGE * len(grid):
        return []
    folder = keyed[0].path.parent if keyed else Path(".")
    out = []
    for model, mode, ctx in grid:
        if (model, mode, ctx) in have:
            continue
        run = RunSummary(path=folder / f"{model}_{mode}_ctx{ctx}", key={"model": model, "mode": mode, "context": ctx},
                         key_source="grid", error="no trace and no Python timings for this configuration")
        run.flags.append(("missing", f"the sweep's grid ({len(models)} models x {len(contexts)} contexts x "
                                     f"{len(modes)} modes) has no trace or .pytime.json for it"))
        out.append(run)
    return out


def _sidecar_runs(sidecars: Sequence[Path], traces: Sequence[Path], rx: re.Pattern[str]) -> list[RunSummary]:
    """Runs for pytime sidecars given without their trace: a configuration that did not fit in GPU
    memory (``"status": "oom"``: flagged ``stopped_early``) or whose trace is missing (``load_error``)."""
    have = {(t.parent.resolve(), trace_stem(t)) for t in traces}
    runs = []
    for side in sidecars:
        stem = side.name[: -len(PYTIME_SUFFIX)]
        if (side.parent.resolve(), stem) in have:
            continue  # read beside its trace
        record, problem = read_pytime(side)
        named = key_from_name(stem, rx)
        key = {**(_pytime_key(record) if record else {}), **(named or {})} or {"model": stem}
        source = "file name" if named else "pytime sidecar" if record else "none"
        if record is not None and record.get("status") == "oom":
            error = str(record.get("error") or "out of memory")[:200]
            run = RunSummary(path=side, key=key, key_source=source, pytime_path=side,
                             oom=f"{side.name}: {error}", error="no trace: the run did not fit in GPU memory")
            run.flags.append(("stopped_early", f"did not fit in GPU memory ({side.name}: {error})"))
        else:
            why = problem or f"{side.name} has no trace {stem}.sqlite[.xz] beside it"
            run = RunSummary(path=side, key=key, key_source=source, pytime_path=side, error=why)
            run.flags.append(("load_error", why))
        runs.append(run)
    return runs


def build_sweep(
    paths: Iterable[Path | str],
    *,
    key_pattern: str = DEFAULT_KEY_PATTERN,
    exclude: str | Iterable[str] | None = DEFAULT_EXCLUDE,
    expected_steps: int | None = None,
    model_configs: Mapping[str, Mapping[str, object]] | None = None,
    loader: Callable[[Path], Trace] | None = None,
    strict: bool = False,
) -> SweepResult:
    """Load every trace in ``paths`` (files or folders), key it, and build the sweep tables.

    ``key_pattern``: regex with named groups searched in each file name (``model``, ``mode``,
    ``context`` drive the tables; ``d_model``, ``heads``, ``batch`` feed the attention FLOP estimate);
    a name that does not match is keyed from NVTX texts and metadata. ``expected_steps``: measured
    steps every run should have (default: the most common count). ``strict``: raise on the first
    unreadable trace instead of flagging it (``load_error``)."""
    given = expand_paths(paths)
    sidecars = [p for p in given if p.name.endswith(PYTIME_SUFFIX)]
    files = [p for p in given if not p.name.endswith(PYTIME_SUFFIX)]
    if not files and not sidecars:
        raise ParameterError("sweep: no trace files given", hint="pass results/*.sqlite or a folder")
    if expected_steps is not None and expected_steps < 1:
        raise ParameterError(f"expected steps must be >= 1, not {expected_steps}")
    rx = compile_key_pattern(key_pattern)
    load = loader or _default_loader()
    manifest = read_manifests(files)
    runs: list[RunSummary] = []
    with tempfile.TemporaryDirectory(prefix="analyzer-sweep-") as tmpdir:
        for path in files:
            named = key_from_name(path, rx)
            try:
                trace = _open_trace(path, load, Path(tmpdir))
            except AnalyzerError as err:
                if strict:
                    raise
                run = RunSummary(path=path, key=named or {"model": trace_stem(path)},
                                 key_source="file name" if named else "none", error=str(err))
                run.flags.append(("load_error", str(err)))
                runs.append(run)
                continue
            if named is not None:
                key, source = named, "file name"
                if "mode" not in key or "model" not in key or "context" not in key:
                    extra, how = key_from_trace(trace)
                    key = {**extra, **key}
                    source = f"file name + {how}"
            else:
                key, source = key_from_trace(trace)
            side = pytime_path(path)
            record, problem = read_pytime(side)
            if record is not None:
                key = {**_pytime_key(record), **key}  # the file name wins where both say
            run = summarize_run(trace, path, key, source, exclude=exclude, model_configs=model_configs)
            run.oom = _oom_evidence(path, trace, manifest)
            run.python_note = problem
            if record is not None:
                run.pytime_path = side
                run.python = _python_phases(record)
                if record.get("status") == "oom" and not run.oom:
                    run.oom = f"{side.name}: {str(record.get('error') or 'out of memory')[:160]}"
            del trace
            runs.append(run)
    runs += _sidecar_runs(sidecars, files, rx)
    runs += _missing_runs(runs)
    _flag_runs(runs, expected_steps)
    return _assemble(runs, key_pattern)


def _mean(values: Sequence[int]) -> float:
    return float(statistics.fmean(values)) if values else float("nan")


def _std(values: Sequence[int]) -> float:
    return float(statistics.stdev(values)) if len(values) > 1 else (0.0 if values else float("nan"))


def async_thresholds(rules_path: Path | str | None = None) -> tuple[float, int]:
    """``(min_ratio, min_untimed_ns)``: the ``async-range-timing`` rule's defaults in the pack at
    ``rules_path`` (the built-in pack by default), so that the sweep flags the ranges the single-trace
    report names. A pack without that rule gives the built-in values (1.25, 1 ms)."""
    from analyzer.pipeline import default_rules_path
    from analyzer.rules.loader import load_pack

    try:
        rule = load_pack(rules_path or default_rules_path()).get("async-range-timing")
    except AnalyzerError:
        return 1.25, 1_000_000
    params = {p.name: p.default for p in rule.parameters}
    return float(params.get("min_ratio", 1.25)), int(params.get("min_untimed", 1_000_000))


def _measured_by(cpu: Sequence[int], time: Sequence[int]) -> str:
    """``CPU wall`` when every step's CPU wall time is its phase time (within
    :data:`~analyzer.facts.phase_index.MEASURE_TOLERANCE`), ``GPU timeline`` when none is, else ``mixed``."""
    off = [abs(t - c) > MEASURE_TOLERANCE * max(t, c) for c, t in zip(cpu, time)]
    return "" if not off else "GPU timeline" if all(off) else "CPU wall" if not any(off) else "mixed"


def _waited_text(waited: int, count: int) -> str:
    return "" if count == 0 else "yes" if waited == count else "no" if waited == 0 else f"{waited} of {count}"


def _waited_count(waited: int, count: int) -> str:
    return (f"none of {count} instances waited" if waited == 0 else f"all {count} instances waited"
            if waited == count else f"{waited} of {count} instances waited")


def _phase_stats(r: RunSummary, phase: str) -> dict[str, list[int]] | None:
    """Per step (steps that hold the phase) of a run: ``cpu``, ``gpu``, ``span``, ``time``, ``count``,
    ``waited`` (ns / counts). ``phase`` is forward, backward, optimizer_step or step."""
    s = r.split
    if phase == "forward" and r.forward_cpu:
        return {"cpu": r.forward_cpu, "gpu": r.forward_gpu, "span": r.forward_span, "time": r.forward_time,
                "count": r.forward_count, "waited": r.forward_waited}
    if s is None or not len(s):
        return None
    if phase == "step":
        cpu, span = s["cpu_ns"].astype(int).tolist(), s["span_ns"].astype(int).tolist()
        return {"cpu": cpu, "gpu": s["gpu_ns"].astype(int).tolist(), "span": span,
                "time": [max(c, g) for c, g in zip(cpu, span)], "count": [1] * len(cpu),
                "waited": s["waited"].astype(int).tolist()}
    if f"{phase}_count" not in s.columns:
        return None
    has = s[s[f"{phase}_count"] > 0]
    if not len(has):
        return None
    return {k: has[f"{phase}_{c}"].astype(int).tolist() for k, c in (
        ("cpu", "cpu_ns"), ("gpu", "gpu_ns"), ("span", "span_ns"), ("time", "phase_ns"), ("count", "count"),
        ("waited", "waited"))}


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


def _flag_timing(r: RunSummary, min_ratio: float, min_untimed: int) -> None:
    """``async_range``, ``residual_catch_up`` and ``python_disagrees`` for one run."""
    late: list[str] = []
    for phase in ("forward", "backward", "optimizer_step"):
        st = _phase_stats(r, phase)
        if st is None:
            continue
        cpu, span, time, n = sum(st["cpu"]), sum(st["span"]), sum(st["time"]), sum(st["count"])
        if n and span >= min_ratio * cpu and (time - cpu) / n >= min_untimed:
            late.append(phase)
            r.flags.append(("async_range", (
                f"{phase} ends before its GPU work: CPU wall {_ms(cpu / n)} per instance, GPU span "
                f"{_ms(span / n)} ({span / max(cpu, 1):.1f}x; {_waited_count(sum(st['waited']), n)}): "
                f"its CPU wall time measures the kernel launches; the tables' phase time, {_ms(time / n)}, "
                "runs to the end of its GPU work")))
    s = r.split
    if s is not None and len(s) and r.mode in ("forward_backward", "training") and "residual_sync_ns" in s:
        step, res, res_sync = s["cpu_ns"].mean(), s["residual_cpu_ns"].mean(), s["residual_sync_ns"].mean()
        if step > 0 and res >= CATCH_UP_MIN_RESIDUAL * step and res_sync >= CATCH_UP_MIN_SYNC * res:
            phases = [p for p in ("forward", "backward", "optimizer_step") if f"{p}_phase_ns" in s]
            by_time = step - sum(s[f"{p}_phase_ns"].mean() for p in phases)
            cause = (f"the phases that ended before their GPU work ({', '.join(late)}) leave it to the final "
                     "synchronization" if late else "the GPU still runs queued work when the phases end")
            r.flags.append(("residual_catch_up", (
                f"the residual is {100 * res / step:.1f}% of the step ({_ms(res)}), {_ms(res_sync)} of it in "
                f"synchronizing calls waiting for the GPU: {cause}; by phase time the residual is "
                f"{_ms(by_time)} ({100 * by_time / step:.1f}%)")))
    if r.python:
        for phase in TIMED_PHASES:
            st, py = _phase_stats(r, phase), r.python.get(phase)
            if st is None or py is None or not st["time"]:
                continue
            t_ms = _mean(st["time"]) / 1e6
            ratio = py["mean_ms"] / t_ms if t_ms > 0 else float("nan")
            if not math.isnan(ratio) and abs(ratio - 1) > PYTHON_TOLERANCE:
                n_text = f"n={int(py['n'])}" if not math.isnan(py["n"]) else "n=?"
                samples: tuple[tuple[str, float, float], ...] = (
                    ("the trace's steps", _std(st["time"]) / 1e6, t_ms), ("Python's", py["std_ms"], py["mean_ms"]))
                spread = [f"{who} ± {sd:.2f} ms" for who, sd, mean in samples
                          if mean > 0 and not math.isnan(sd) and sd > 0.2 * mean]
                if spread:
                    why = f"the samples vary ({', '.join(spread)}): a few slow steps decide the means"
                elif _measured_by(st["cpu"], st["time"]) == "CPU wall":
                    why = ("launch-bound here (the GPU keeps up with the launches), so both time the host, "
                           "whose speed differs between the profiled steps and the timed ones")
                else:
                    why = "not noise or launch overhead: compare the two runs' GPU clocks and code paths"
                r.flags.append(("python_disagrees", (
                    f"{phase}: Python (synchronized, {n_text}) {py['mean_ms']:.2f} ms, the trace's phase time "
                    f"{t_ms:.2f} ms ({ratio:.2f}x; CPU wall {_mean(st['cpu']) / 1e6:.2f} ms, GPU span "
                    f"{_mean(st['span']) / 1e6:.2f} ms); {why}")))


_SIZE_RANK = {m: i for i, m in enumerate(PRESETS)}


def _flag_monotonic(runs: list[RunSummary], tolerance: float = MONOTONIC_TOLERANCE) -> None:
    """``not_monotonic``: per mode, a bigger model (same context) or a longer context (same model)
    whose forward pass (or synchronized step) is shorter than the smaller one's by more than
    ``tolerance``, by CPU wall or by phase time; the reason says whether asynchronous timing explains
    it (the phase time, GPU span where the range ended early, still grows)."""
    entries: dict[tuple[str, str], dict[tuple[str, int], tuple[float, float, RunSummary, float, str]]] = {}
    for r in runs:
        if r.error is not None or r.context is None:
            continue
        for what in ("forward", "step"):
            if what == "step" and r.mode not in ("forward_backward", "training"):
                continue
            st = _phase_stats(r, what)
            if st is None or not st["cpu"]:
                continue
            entries.setdefault((r.mode, what), {})[(r.model, r.context)] = (
                _mean(st["cpu"]), _mean(st["time"]), r, _std(st["time"]), _measured_by(st["cpu"], st["time"]))
    for (mode, what), table in entries.items():
        for (model, ctx), (cpu, time, run, std, by) in table.items():
            smaller = [(m, c) for (m, c) in table if (c == ctx and m != model and model in _SIZE_RANK
                                                     and _SIZE_RANK.get(m, 1 << 30) < _SIZE_RANK[model])
                       or (m == model and c < ctx)]
            worst = None
            for key in smaller:
                o_cpu, o_time = table[key][:2]
                by_cpu, by_time = cpu < o_cpu * (1 - tolerance), time < o_time * (1 - tolerance)
                if (by_cpu or by_time) and (worst is None or o_cpu / max(cpu, 1) > worst[1]):
                    worst = (key, o_cpu / max(cpu, 1), by_cpu, by_time, o_cpu, o_time)
            if worst is None:
                continue
            (o_model, o_ctx), _, by_cpu, by_time, o_cpu, o_time = worst
            axis = f"ctx{o_ctx}" if o_model == model else f"{o_model} (a smaller model)"
            label = "forward pass" if what == "forward" else "step"
            if by_cpu and not by_time:
                why = (f"explained by asynchronous timing: the forward ranges end before their GPU work, and by "
                       f"phase time (read from the GPU timeline) it takes {_ms(time)} against {_ms(o_time)}"
                       if what == "forward" else f"by phase time {_ms(time)} against {_ms(o_time)}")
                text = f"{label} CPU wall {_ms(cpu)} is shorter than {_ms(o_cpu)} at {axis}; {why}"
            else:
                o_std, o_by = table[(o_model, o_ctx)][3:5]
                noisy = [f"{where} ± {_ms(sd)} over its steps" for where, sd, mean in (
                    (axis, o_std, o_time), ("this run", std, time)) if mean > 0 and sd > 0.2 * mean]
                if noisy:
                    cause = f"the steps vary ({'; '.join(noisy)}): a few slow steps, not the model"
                elif by == o_by == "CPU wall":
                    cause = ("both are launch-bound (the GPU keeps up with the host's launches), so both time "
                             "the host, which does not grow with the model or context and varies between runs")
                else:
                    cause = "noise, clocks, a different code path, or a mislabelled run"
                text = (f"{label} {'CPU wall ' + _ms(cpu) + ' and ' if by_cpu else ''}phase time {_ms(time)} "
                        f"shorter than at {axis} ({_ms(o_time)}; CPU wall {_ms(o_cpu)}): not explained by "
                        f"asynchronous timing; {cause}")
            run.flags.append(("not_monotonic", text))


def _flag_runs(runs: list[RunSummary], expected_steps: int | None) -> None:
    ok = [r for r in runs if r.error is None]
    # compare step counts within the campaign: the runs keyed by file name, when there are any
    campaign = [r for r in ok if r.key_source.startswith("file name")] or ok
    in_campaign = {id(r) for r in campaign}
    counts = [r.steps for r in campaign if r.steps > 0]
    typical = expected_steps or (statistics.mode(counts) if counts else None)
    forward_of = {(r.model, r.context): _mean(r.forward_cpu) for r in ok if r.mode == "forward"
                  and r.forward_cpu}
    for r in ok:
        names = r.range_names
        # stopped early
        if r.oom:
            r.flags.append(("stopped_early", f"out of memory: {r.oom}"))
        if r.steps == 0:
            r.flags.append(("stopped_early", "no measured step_N ranges"))
        elif typical is not None and r.steps < typical and (expected_steps or id(r) in in_campaign):
            whom = "expected" if expected_steps else "most runs have"
            r.flags.append(("stopped_early", f"{r.steps} measured steps, {whom} {typical}"))
        # mode label vs ranges
        mode = r.mode
        has_b, has_o, has_f = "backward" in names, "optimizer_step" in names, "forward" in names
        if mode in MODES:
            wrong = []
            if not has_f:
                wrong.append("no forward ranges")
            if mode == "forward" and (has_b or has_o):
                wrong.append("has " + " and ".join(n for n, h in (("backward", has_b),
                                                                   ("optimizer_step", has_o)) if h))
            if mode in ("forward_backward", "training") and not has_b:
                wrong.append("no backward ranges")
            if mode == "forward_backward" and has_o:
                wrong.append("has optimizer_step ranges")
            if mode == "training" and not has_o:
                wrong.append("no optimizer_step ranges")
            if wrong and r.steps:
                r.flags.append(("mode_mismatch", f"mode {mode!r} but {', '.join(wrong)}"))
        elif mode:
            r.flags.append(("mode_mismatch", f"unknown mode {mode!r} (expected one of {', '.join(MODES)})"))
        # no backward GPU work
        if mode in ("forward_backward", "training") and r.split is not None and len(r.split):
            bwd_gpu = int(r.split["backward_gpu_ns"].sum())
            n = int(r.split["backward_count"].sum())
            if bwd_gpu == 0 and n > 0:  # no backward ranges at all is a mode_mismatch
                reason = f"mode {mode!r} but no GPU work launched inside backward ({n} backward ranges)"
                r.flags.append(("no_backward", reason))
        # step shorter than forward
        if r.split is not None and len(r.split) and mode in ("forward_backward", "training"):
            step_ms = r.split["cpu_ns"].mean() / 1e6
            own = _mean(r.forward_cpu) / 1e6
            if not math.isnan(own) and step_ms < own:
                r.flags.append(("step_shorter_than_forward",
                                f"step {step_ms:.2f} ms is shorter than its own forward pass {own:.2f} ms"))
            ref = forward_of.get((r.model, r.context))
            if ref is not None and step_ms < ref / 1e6:
                reason = (f"step {step_ms:.2f} ms is shorter than the forward pass of "
                          f"{r.model} forward ctx{r.context} ({ref / 1e6:.2f} ms)")
                r.flags.append(("step_shorter_than_forward", reason))
    min_ratio, min_untimed = async_thresholds()
    for r in ok:
        _flag_timing(r, min_ratio, min_untimed)
    _flag_monotonic(ok)


def _order(frame: pd.DataFrame) -> pd.DataFrame:
    if frame.empty:
        return frame
    model_rank = {m: i for i, m in enumerate(PRESETS)}
    mode_rank = {m: i for i, m in enumerate(MODES)}
    key = pd.DataFrame({
        "m": frame["model"].map(lambda m: model_rank.get(m, len(model_rank))),
        "mn": frame["model"].astype(str),
        "mo": frame["mode"].map(lambda m: mode_rank.get(m, len(mode_rank))),
        "c": frame["context"].map(lambda c: int(c) if isinstance(c, (int, np.integer)) else 1 << 40),
    })
    order = key.sort_values(["m", "mn", "mo", "c"], kind="stable").index
    return frame.loc[order].reset_index(drop=True)


def _base(r: RunSummary) -> dict[str, object]:
    return {"model": r.model, "mode": r.mode, "context": r.context}


def _flag_text(r: RunSummary) -> str:
    """The checks a run failed, for the tables' ``flags`` column (reasons are in the flags table)."""
    return ", ".join(dict.fromkeys(check for check, _ in r.flags))


def _assemble(runs: list[RunSummary], key_pattern: str) -> SweepResult:
    run_rows, fwd_rows, top_rows, train_rows, mix_rows, att_rows, flag_rows = [], [], [], [], [], [], []
    timing_rows: list[dict[str, object]] = []
    nan = float("nan")
    for r in runs:
        base = _base(r)
        flags = _flag_text(r)
        python = r.pytime_path.name if r.pytime_path is not None else r.python_note
        run_rows.append({**base, "path": str(r.path), "key_source": r.key_source, "steps": r.steps,
                         "oom": r.oom or "", "error": r.error or "", "python": python, "flags": flags})
        for check, reason in r.flags:
            flag_rows.append({**base, "path": str(r.path), "check": check, "reason": reason})
        if r.error is not None:
            continue
        py = r.python or {}
        if r.forward_cpu:
            pf = py.get("forward", {})
            fwd_rows.append({**base, "steps": len(r.forward_cpu),
                             "cpu_mean_ms": _mean(r.forward_cpu) / 1e6, "cpu_std_ms": _std(r.forward_cpu) / 1e6,
                             "gpu_mean_ms": _mean(r.forward_gpu) / 1e6, "gpu_std_ms": _std(r.forward_gpu) / 1e6,
                             "span_mean_ms": _mean(r.forward_span) / 1e6, "span_std_ms": _std(r.forward_span) / 1e6,
                             "waited": _waited_text(sum(r.forward_waited), sum(r.forward_count)),
                             "measured_by": _measured_by(r.forward_cpu, r.forward_time),
                             "forward_ms": _mean(r.forward_time) / 1e6, "forward_std_ms": _std(r.forward_time) / 1e6,
                             "python_ms": pf.get("mean_ms", nan), "python_std_ms": pf.get("std_ms", nan),
                             "python_n": pf.get("n", nan), "flags": flags})
        for phase in TIMED_PHASES:
            st, pp = _phase_stats(r, phase), py.get(phase)
            if st is None and pp is None:
                continue
            time = _mean(st["time"]) / 1e6 if st else nan
            cpu = _mean(st["cpu"]) / 1e6 if st else nan
            pm = pp["mean_ms"] if pp else nan
            timing_rows.append({
                **base, "phase": phase, "steps": len(st["cpu"]) if st else 0, "cpu_ms": cpu,
                "span_ms": _mean(st["span"]) / 1e6 if st else nan, "time_ms": time,
                "measured_by": _measured_by(st["cpu"], st["time"]) if st else "",
                "waited": _waited_text(sum(st["waited"]), sum(st["count"])) if st else "",
                "python_ms": pm, "python_std_ms": pp["std_ms"] if pp else nan, "python_n": pp["n"] if pp else nan,
                "python_vs_time": pm / time if st and pp and time > 0 else nan,
                "python_vs_cpu": pm / cpu if st and pp and cpu > 0 else nan, "flags": flags})
        if r.top is not None and len(r.top):
            t = r.top.iloc[0]
            top_rows.append({**base, "kernel": t["name"], "category": t.get("category", ""),
                             "count": int(t["count"]), "total_ms": t["total_ns"] / 1e6,
                             "mean_us": t["mean_ns"] / 1e3, "share": float(t["share"]), "flags": flags})
        s = r.split
        trains = r.mode in ("forward_backward", "training") or bool(
            {"backward", "optimizer_step"} & r.range_names)
        if s is not None and len(s) and trains:
            step = s["cpu_ns"].mean()
            step_gpu = s["gpu_ns"].mean()
            row = {**base, "steps": len(s), "step_cpu_ms": step / 1e6, "step_gpu_ms": step_gpu / 1e6}
            for p, label in (("forward", "forward"), ("backward", "backward"),
                             ("optimizer_step", "optimizer"), ("residual", "residual")):
                cpu = s[f"{p}_cpu_ns"].mean()
                row[f"{label}_cpu_ms"] = cpu / 1e6
                row[f"{label}_cpu_pct"] = 100.0 * cpu / step if step else float("nan")
                row[f"{label}_gpu_ms"] = s[f"{p}_gpu_ns"].mean() / 1e6
                row[f"{label}_gpu_pct"] = 100.0 * s[f"{p}_gpu_ns"].mean() / step_gpu if step_gpu else float("nan")
            rest = step
            for p, label in (("forward", "forward"), ("backward", "backward"), ("optimizer_step", "optimizer")):
                time = s[f"{p}_phase_ns"].mean()
                rest -= time
                row[f"{label}_span_ms"] = s[f"{p}_span_ns"].mean() / 1e6
                row[f"{label}_time_ms"] = time / 1e6
                row[f"{label}_time_pct"] = 100.0 * time / step if step else nan
                has = s[s[f"{p}_count"] > 0]
                row[f"{label}_measured_by"] = _measured_by(has[f"{p}_cpu_ns"].tolist(), has[f"{p}_phase_ns"].tolist())
            row["residual_time_ms"] = rest / 1e6
            row["residual_time_pct"] = 100.0 * rest / step if step else nan
            row["residual_sync_ms"] = s["residual_sync_ns"].mean() / 1e6
            row["residual_sync_pct"] = 100.0 * s["residual_sync_ns"].mean() / step if step else nan
            row["flags"] = flags
            train_rows.append(row)
        if r.mix is not None and len(r.mix):
            for m in r.mix.itertuples(index=False):
                mix_rows.append({**base, "phase": m.phase, "category": m.category, "count": int(m.count),
                                 "total_ms": m.total_ns / 1e6, "share": float(m.share), "flags": flags})
        if r.attention is not None and len(r.attention):
            a = r.attention.iloc[0]
            if a["calls"] or a["softmax_ns"] or a["matmul_ns"]:
                att_rows.append({**base, "calls": int(a["calls"]), "softmax_ms": a["softmax_ns"] / 1e6,
                                 "matmul_ms": a["matmul_ns"] / 1e6, "other_ms": a["other_ns"] / 1e6,
                                 "softmax_range_ms": a["softmax_range_gpu_ns"] / 1e6,
                                 "time_ratio": a["time_ratio"], "d_head": a["d_head"],
                                 "flop_ratio": a["flop_ratio"], "time_per_flop_ratio": a["time_per_flop_ratio"],
                                 "flops_note": a["flops_note"], "flags": flags})

    def frame(rows: list[dict[str, object]], cols: list[str]) -> pd.DataFrame:
        out = _order(pd.DataFrame(rows, columns=cols)) if rows else pd.DataFrame(columns=cols)
        out["context"] = out["context"].astype("Int64")  # missing contexts stay <NA>, not float NaN
        return out

    base_cols = ["model", "mode", "context"]
    train_cols = base_cols + ["steps", "step_cpu_ms", "step_gpu_ms"] + [
        f"{label}_{kind}" for label in ("forward", "backward", "optimizer", "residual")
        for kind in ("cpu_ms", "cpu_pct", "gpu_ms", "gpu_pct")] + [
        f"{label}_{kind}" for label in ("forward", "backward", "optimizer")
        for kind in ("span_ms", "time_ms", "time_pct", "measured_by")] + [
        "residual_time_ms", "residual_time_pct", "residual_sync_ms", "residual_sync_pct", "flags"]
    return SweepResult(
        runs=frame(run_rows, base_cols + ["path", "key_source", "steps", "oom", "error", "python", "flags"]),
        forward=frame(fwd_rows, base_cols + ["steps", "cpu_mean_ms", "cpu_std_ms", "gpu_mean_ms",
                                             "gpu_std_ms", "span_mean_ms", "span_std_ms", "waited",
                                             "measured_by", "forward_ms", "forward_std_ms", "python_ms",
                                             "python_std_ms", "python_n", "flags"]),
        timing=frame(timing_rows, base_cols + [  # a configuration's phases in TIMED_PHASES order (stable sort)
            "phase", "steps", "cpu_ms", "span_ms", "time_ms", "measured_by", "waited", "python_ms",
            "python_std_ms", "python_n", "python_vs_time", "python_vs_cpu", "flags"]),
        top_kernel=frame(top_rows, base_cols + ["kernel", "category", "count", "total_ms", "mean_us",
                                                "share", "flags"]),
        training=frame(train_rows, train_cols),
        kernel_mix=frame(mix_rows, base_cols + ["phase", "category", "count", "total_ms", "share", "flags"]),
        attention=frame(att_rows, base_cols + ["calls", "softmax_ms", "matmul_ms", "other_ms",
                                               "softmax_range_ms", "time_ratio", "d_head", "flop_ratio",
                                               "time_per_flop_ratio", "flops_note", "flags"]),
        flags=frame(flag_rows, base_cols + ["path", "check", "reason"]),
        key_pattern=key_pattern,
        summaries=runs,
    )
