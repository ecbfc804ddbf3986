"""One analysis, end to end: load -> window -> facts -> rules -> :class:`Analysis`.

The CLI, ``analyze rules test`` and the benchmarks all go through :func:`analyze_trace`, so what a
test checks is what a user gets.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from analyzer.analysis import Analysis
from analyzer.errors import InputError

Progress = Callable[[str], None] | None


def default_rules_path() -> Path:
    """The built-in default pack (``rules/default.yaml`` in the source tree is a link to it)."""
    return Path(str(resources.files("analyzer.rules").joinpath("packs/default.yaml")))


@dataclass(frozen=True)
class AnalysisOptions:
    rules_file: Path | None = None
    sets: tuple[str, ...] = ()
    window_spec: str | None = None
    ncu_files: tuple[Path, ...] = ()
    exclude_ranges: tuple[str, ...] = ("warmup*",)
    only_ranges: str | None = None
    fact_options: dict[str, Any] = field(default_factory=dict)


def load_rules(options: AnalysisOptions) -> Any:
    """Load, validate and override the rule pack before any trace is read."""
    from analyzer.rules import apply_overrides, load_pack

    pack = load_pack(options.rules_file or default_rules_path())
    return apply_overrides(pack, list(options.sets)) if options.sets else pack


def analyze_trace(
    path: Path | str,
    pack: Any = None,
    *,
    options: AnalysisOptions | None = None,
    ncu: Any = None,
    progress: Progress = None,
) -> Analysis:
    """Analyze one nsys trace with ``pack`` (loaded from ``options`` when None)."""
    from analyzer.facts import FactStore
    from analyzer.facts.scalars import trace_scalars
    from analyzer.loading import load_trace
    from analyzer.rules import evaluate
    from analyzer.window import choose_window

    options = options or AnalysisOptions()
    if pack is None:
        pack = load_rules(options)
    trace = load_trace(Path(path), progress=progress)
    if progress:
        progress(f"{trace.name}: choosing the analysis window")
    window = choose_window(trace, options.window_spec, exclude=options.exclude_ranges)
    if ncu is not None:  # timeline totals of the matched kernels over the analysis window, as rules see them
        from analyzer.loading.ncu import join_ncu

        trace.extras["ncu"] = join_ncu(ncu, trace, window=(window.start_ns, window.end_ns))
    fact_options = {
        "exclude_ranges": options.exclude_ranges,
        "only_ranges": options.only_ranges,
        **options.fact_options,
    }
    store = FactStore(trace, window, fact_options)
    if progress:
        progress(f"{trace.name}: evaluating {len(pack.rules)} rules")
    findings = evaluate(pack, store, window, trace_scalars(store))
    return Analysis(
        trace=trace,
        window=window,
        findings=findings,
        facts=store,
        rules_file=_rules_label(getattr(pack, "path", "")),
        parameters={r.name: {p.name: p.value for p in r.parameters} for r in pack.rules},
        ncu=trace.extras.get("ncu"),
    )


def _rules_label(path: object) -> str:
    """How a report names the rule pack: the built-in one by its source-tree name, others as given."""
    if path and Path(str(path)).resolve() == default_rules_path().resolve():
        return "built-in default pack (rules/default.yaml)"
    return str(path)


def analyze_paths(
    paths: Sequence[Path], options: AnalysisOptions, *, progress: Progress = None
) -> list[Analysis]:
    """Analyze every nsys trace in ``paths``; ncu files among them (by content) and ``options.ncu_files``
    are loaded once and joined to each trace."""
    from analyzer.loading.ncu import detect_ncu, load_ncu

    pack = load_rules(options)  # rules fail before any trace is read
    traces: list[Path] = []
    ncu_paths: list[Path] = list(options.ncu_files)
    for path in paths:
        if not path.exists():
            raise InputError(path, "no such file", hint="check the path")
        if path.is_file() and detect_ncu(path) is not None:
            ncu_paths.append(path)
        else:
            traces.append(path)
    if not traces:
        raise InputError(
            paths[0], "no Nsight Systems trace among the inputs",
            hint="give a .sqlite or .nsys-rep next to the ncu files",
        )
    ncu = load_ncu(ncu_paths) if ncu_paths else None
    return [analyze_trace(p, pack, options=options, ncu=ncu, progress=progress) for p in traces]
