"""Sweep tables: many traces of one profiling campaign (model x context x mode) side by side.

``build_sweep(paths)`` loads each trace once (one at a time, so memory stays that of the largest),
keys it from its file name (``small_forward_ctx512.sqlite``, ``medium_training_ctx256.sqlite.xz``;
configurable regex with named groups) or, failing that, from NVTX texts and metadata, and builds the
tables a campaign report needs, all exact (kernels attributed to the range that launched them):

``runs``        one row per trace: key, where the key came from, measured steps, OOM evidence
``forward``     forward pass per step: CPU wall and GPU time, mean and sample std over steps
``top_kernel``  the kernel with the most time per configuration (warmup excluded): count, mean, share
``training``    forward / backward / optimizer_step / residual per step: CPU and GPU ms and % of step
                (runs labelled forward_backward/training or holding backward/optimizer_step ranges)
``kernel_mix``  kernel category mix inside ``forward`` (count, ms, share)
``attention``   softmax vs matmul kernel time in the attention ranges, FLOP ratio and its provenance
``flags``       rows that cannot be right, with the reason

Rows that cannot be right carry the failed checks' names in every table's ``flags`` column, and one
row per reason in the ``flags`` table:
``step_shorter_than_forward`` (a step shorter than its own forward pass, or than the forward pass of
the forward-only run of the same model and context), ``no_backward`` (forward_backward/training
mode with no GPU work inside ``backward``), ``stopped_early`` (fewer measured steps than expected or
than most runs, an OOM message in NVTX, a log beside the trace or the suite's ``manifest.jsonl``),
``mode_mismatch`` (the mode label disagrees with the ranges present), ``load_error``.

``render_sweep(result, fmt)`` renders Markdown, CSV files (one per table) or one self-contained HTML
page (Jinja2 with autoescape: every trace string is escaped).
"""
from __future__ import annotations

import json
import lzma
import math
import re
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer.errors import AnalyzerError, InputError, ParameterError
from analyzer.loading.model import Trace
from analyzer.phases._index import DEFAULT_EXCLUDE, PhaseIndex
from analyzer.phases.table import (
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
TRACE_SUFFIXES: tuple[str, ...] = (".xz", ".gz", ".sqlite", ".nsys-rep", ".qdrep")

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
}


# ------------------------------------------------------------------------------------------------
# keys
# ------------------------------------------------------------------------------------------------
def trace_stem(path: Path | str) -> str:
    """File name without trace suffixes (``medium_training_ctx256.sqlite.xz`` -> ``medium_training_ctx256``)."""
    name = Path(path).name
    changed = True
    while changed:
        changed = False
        for suffix in TRACE_SUFFIXES:
            if name.lower().endswith(suffix) and len(name) > len(suffix):
                name, changed = name[: -len(suffix)], True
    return name


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
        if side.is_file() and side.stat().st_size < 50_000_000:
            for line in side.read_text(errors="replace").splitlines():
                if OOM_PATTERN.search(line):
                    return f"{side.name}: {line.strip()[:160]}"
    if record is not None and record.get("exit_code") not in (0, None):
        return f"manifest.jsonl: {stem} exited with code {record.get('exit_code')}"
    return None


def _read_manifests(paths: Sequence[Path]) -> dict[str, dict[str, object]]:
    """``manifest.jsonl`` records (by ``name``) from the folders holding the traces."""
    out: dict[str, dict[str, object]] = {}
    for folder in sorted({p.parent for p in paths}):
        manifest = folder / "manifest.jsonl"
        if not manifest.is_file():
            continue
        for line in manifest.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "name" in record:
                out[str(record["name"])] = record
    return out


def summarize_run(
    trace: Trace,
    path: Path,
    key: dict[str, object],
    key_source: str,
    *,
    exclude: str | Iterable[str] | None = DEFAULT_EXCLUDE,
    model_configs: Mapping[str, Mapping[str, object]] | None = None,
) -> RunSummary:
    """The per-trace part of the sweep (also usable alone)."""
    idx = PhaseIndex.build(trace)
    cats = kernel_categories(trace)
    split = step_split(trace, exclude=exclude, index=idx)
    run = RunSummary(path=path, key=key, key_source=key_source, steps=len(split), split=split)
    run.range_names = frozenset(str(t) for t in idx.measured_ranges(exclude)["text"].astype(object))
    if len(split) and (split["forward_count"] > 0).any():
        has = split[split["forward_count"] > 0]
        run.forward_cpu = has["forward_cpu_ns"].astype(int).tolist()
        run.forward_gpu = has["forward_gpu_ns"].astype(int).tolist()
    else:  # forward ranges outside step_N ranges: one value per instance
        measured = idx.measured_ranges(exclude)
        fwd = measured[measured["text"].astype(object) == "forward"]
        gpu = idx.instance_gpu(fwd["range_id"].to_numpy())
        run.forward_cpu = fwd["duration"].astype(int).tolist()
        run.forward_gpu = gpu["gpu_ns"].astype(int).tolist()
    top = top_kernels(trace, exclude=exclude, n=1, index=idx)
    if len(top):
        codes, names = idx.kernel_name_codes
        first_row = pd.Series(np.arange(len(codes))).groupby(codes).first()  # a kernel row per name
        cat_of = pd.Series(cats.to_numpy()[first_row.to_numpy()], index=names[first_row.index.to_numpy()])
        top = top.assign(category=cat_of.reindex(top["name"]).fillna("other").astype(str).to_numpy())
    run.top = top
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
    training: pd.DataFrame
    kernel_mix: pd.DataFrame
    attention: pd.DataFrame
    flags: pd.DataFrame
    key_pattern: str = DEFAULT_KEY_PATTERN
    summaries: list[RunSummary] = field(default_factory=list, repr=False)

    def tables(self) -> dict[str, pd.DataFrame]:
        return {"runs": self.runs, "forward": self.forward, "top_kernel": self.top_kernel,
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
                    shutil.copyfileobj(src, dst, length=1 << 20)
            except (lzma.LZMAError, EOFError) as err:
                raise InputError(path, f"not a valid .xz file ({err})",
                                 hint="re-download it or pass the decompressed .sqlite") from None
            try:
                return loader(target)
            finally:
                target.unlink(missing_ok=True)
    return loader(path)


def _default_loader() -> Callable[[Path], Trace]:
    from analyzer.loading import load_trace  # imported late: the loader pulls in SQLite readers

    return load_trace


def expand_paths(paths: Iterable[Path | str]) -> list[Path]:
    """Files as given; a directory contributes its ``*.sqlite`` and ``*.sqlite.xz`` files."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(q for q in p.iterdir() if q.name.endswith((".sqlite", ".sqlite.xz")))
        else:
            out.append(p)
    return out


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
    files = expand_paths(paths)
    if not files:
        raise ParameterError("sweep: no trace files given", hint="pass results/*.sqlite or a folder")
    if expected_steps is not None and expected_steps < 1:
        raise ParameterError(f"expected steps must be >= 1, not {expected_steps}")
    rx = compile_key_pattern(key_pattern)
    load = loader or _default_loader()
    manifest = _read_manifests(files)
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
            run = summarize_run(trace, path, key, source, exclude=exclude, model_configs=model_configs)
            run.oom = _oom_evidence(path, trace, manifest)
            del trace
            runs.append(run)
    _flag_runs(runs, expected_steps)
    return _assemble(runs, key_pattern)


def _mean(values: Sequence[int]) -> float:
    return float(statistics.fmean(values)) if values else float("nan")


def _std(values: Sequence[int]) -> float:
    return float(statistics.stdev(values)) if len(values) > 1 else (0.0 if values else float("nan"))


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
    for r in runs:
        base = _base(r)
        flags = _flag_text(r)
        run_rows.append({**base, "path": str(r.path), "key_source": r.key_source, "steps": r.steps,
                         "oom": r.oom or "", "error": r.error or "", "flags": flags})
        for check, reason in r.flags:
            flag_rows.append({**base, "path": str(r.path), "check": check, "reason": reason})
        if r.error is not None:
            continue
        if r.forward_cpu:
            fwd_rows.append({**base, "steps": len(r.forward_cpu),
                             "cpu_mean_ms": _mean(r.forward_cpu) / 1e6, "cpu_std_ms": _std(r.forward_cpu) / 1e6,
                             "gpu_mean_ms": _mean(r.forward_gpu) / 1e6, "gpu_std_ms": _std(r.forward_gpu) / 1e6,
                             "flags": flags})
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
        for kind in ("cpu_ms", "cpu_pct", "gpu_ms", "gpu_pct")] + ["flags"]
    return SweepResult(
        runs=frame(run_rows, base_cols + ["path", "key_source", "steps", "oom", "error", "flags"]),
        forward=frame(fwd_rows, base_cols + ["steps", "cpu_mean_ms", "cpu_std_ms", "gpu_mean_ms",
                                             "gpu_std_ms", "flags"]),
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


def render_sweep(result: SweepResult, fmt: str = "md", out_dir: Path | str | None = None) -> str:
    """Markdown, CSV (one file per table in ``out_dir``) or self-contained HTML; see
    :func:`analyzer.phases.render.render_sweep`."""
    from analyzer.phases.render import render_sweep as _render

    return _render(result, fmt, out_dir)  # type: ignore[arg-type]
