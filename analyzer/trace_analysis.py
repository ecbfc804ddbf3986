"""One trace (one rank) analyzed: rules loaded and checked, window chosen, fact store prepared, rules
evaluated, accepted findings marked -> :class:`~analyzer.analysis.Analysis`.

:func:`prepare` and :func:`finish` are the two halves a multi-GPU job runs per rank (cross-rank facts in
between, :mod:`analyzer.job`); :func:`analyze_loaded` runs both for one trace. Which inputs make which
jobs is :mod:`analyzer.pipeline`'s business, above this module and :mod:`analyzer.job`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from analyzer._paths import shown_path
from analyzer.analysis import Analysis
from analyzer.errors import InputError
from analyzer.findings import Finding, NotChecked
from analyzer.progress import Progress
from analyzer.watchdog import note, stage

if TYPE_CHECKING:  # the boundary's types; the modules themselves are imported when a trace is analyzed
    from analyzer.accepted import AcceptedFindings
    from analyzer.facts.registry import FactStore
    from analyzer.loading.cache import TraceCache
    from analyzer.loading.model import Trace
    from analyzer.loading.ncu import NcuReport
    from analyzer.rules.model import RulePack
    from analyzer.rules.selection import RuleSettings


def default_rules_path() -> Path:
    """The built-in default pack (``rules/default.yaml`` in the source tree is a link to it)."""
    return Path(str(resources.files("analyzer.rules").joinpath("packs/default.yaml")))


@dataclass(frozen=True)
class AnalysisOptions:
    rules_file: Path | None = None  # one pack; ``rules_files`` composes several (wins when given)
    sets: tuple[str, ...] = ()  # --set values, applied after ``rule_settings``
    window_spec: str | None = None
    ncu_files: tuple[Path, ...] = ()
    exclude_ranges: tuple[str, ...] = ("warmup*",)
    only_ranges: str | None = None
    timeout: float | None = None  # seconds per trace (None: no limit); see analyzer.watchdog
    #: more fact options (analyzer.facts.registry.FactStore.options), e.g. ``categories_file``
    fact_options: Mapping[str, object] = field(default_factory=dict)
    #: packs composed in order (``default`` is the built-in pack), e.g. ("default", "team.yaml")
    rules_files: tuple[str | Path, ...] = ()
    #: parameter values and rule selection, layer by layer (project configuration, command line);
    #: analyzer.rules.selection.RuleSettings
    rule_settings: tuple[RuleSettings, ...] = ()
    #: findings the project accepts (analyzer.accepted): marked in reports, not counted by --fail-on
    accepted_file: Path | None = None
    accepted_growth: float | None = None  # None: analyzer.accepted.DEFAULT_MAX_GROWTH
    # read/write the columnar trace cache (analyzer.loading.cache); the CLI turns it on (--no-cache off)
    cache: bool = False
    #: GPU power logs recorded beside the run (nvidia-smi CSV / workloads' NVML sampler), aligned by time
    power_files: tuple[Path, ...] = ()
    #: ranks of a multi-GPU job shown in full (report section, swimlanes); the others are one row each in
    #: the job's rank table (analyzer.job.run.featured_ranks). None: every rank
    rank_sections: int | None = 8

    @property
    def packs(self) -> tuple[str | Path, ...]:
        """The pack references to compose: ``rules_files``, else ``rules_file``, else the built-in."""
        if self.rules_files:
            return self.rules_files
        return (self.rules_file,) if self.rules_file is not None else ("default",)


def load_rules(options: AnalysisOptions) -> RulePack:
    """Load, validate, override and select the rule pack before any trace is read."""
    from analyzer.rules import apply_overrides, load_pack
    from analyzer.rules.selection import apply_settings

    pack = load_pack(options.packs)
    if options.rule_settings:
        pack = apply_settings(pack, options.rule_settings)
    return apply_overrides(pack, list(options.sets)) if options.sets else pack


def load_accepted_findings(options: AnalysisOptions) -> AcceptedFindings | None:
    """The accepted-findings file of ``options`` (None without one), checked before any trace is read."""
    if options.accepted_file is None:
        return None
    from analyzer.accepted import DEFAULT_MAX_GROWTH, load_accepted

    growth = options.accepted_growth if options.accepted_growth is not None else DEFAULT_MAX_GROWTH
    return load_accepted(options.accepted_file, max_growth=growth)


def analyze_trace(
    path: Path | str,
    pack: RulePack | None = None,
    *,
    options: AnalysisOptions | None = None,
    ncu: NcuReport | None = None,
    progress: Progress = None,
    trace: Trace | None = None,
    accepted: AcceptedFindings | None = None,
) -> Analysis:
    """Analyze one nsys trace with ``pack`` (loaded from ``options`` when None). ``trace``: the trace
    already loaded from ``path`` (the fuzz harness loads first to recognise repeated cases). Findings
    matching ``accepted`` (an :class:`analyzer.accepted.AcceptedFindings`, else ``options.accepted_file``)
    are marked accepted."""
    from analyzer.loading import load_trace

    options = options or AnalysisOptions()
    if pack is None:
        pack = load_rules(options)
    if accepted is None:
        accepted = load_accepted_findings(options)
    if trace is None:
        with stage("loading"):
            trace = load_trace(Path(path), progress=noting(progress), cache=trace_cache(options))
    return analyze_loaded(trace, pack, options=options, ncu=ncu, progress=progress, accepted=accepted)


def prepare(trace: Trace, options: AnalysisOptions, *, ncu: NcuReport | None = None, progress: Progress = None,
            extra_fact_options: Mapping[str, object] | None = None) -> FactStore:
    """Window and fact store of a loaded trace: everything before the rules run. A multi-GPU job
    prepares every rank this way, matches collectives across ranks, then finishes each rank with
    :func:`finish` (its fact store then knows the rank's waits)."""
    from analyzer.facts import FactStore
    from analyzer.window import choose_window

    progress = noting(progress)
    if options.power_files:
        from analyzer.loading.power import attach_power

        with stage("reading the power log"):
            attach_power(trace, list(options.power_files))
    progress(f"{trace.name}: choosing the analysis window")
    with stage("choosing the window"):
        if options.cache and not options.power_files:  # from the fact cache when chosen before
            from analyzer.facts.cache import choose_window as cached_window

            window = cached_window(trace, options.window_spec, options.exclude_ranges, cached=True,
                                   choose=choose_window)
        else:
            window = choose_window(trace, options.window_spec, exclude=options.exclude_ranges)
    if ncu is not None:  # timeline totals of the matched kernels over the analysis window, as rules see them
        from analyzer.loading.ncu import join_ncu

        with stage("joining ncu metrics"):
            trace.ncu = join_ncu(ncu, trace, window=(window.start_ns, window.end_ns))
    fact_options = {
        "exclude_ranges": options.exclude_ranges,
        "only_ranges": options.only_ranges,
        **options.fact_options,
        **(extra_fact_options or {}),
    }
    store = FactStore(trace, window, fact_options)
    if options.cache and not options.power_files:  # a power log changes the trace after loading
        from analyzer.facts.cache import attach

        attach(store)  # facts computed before on this trace, window and options are read back
    return store


def _caused_by(err: BaseException, kind: type[BaseException]) -> bool:
    seen: BaseException | None = err
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _ops_in_window(store: FactStore) -> int | None:
    """GPU ops (kernels, copies, memsets) starting in the window (None: not counted, no timeline)."""
    if store.trace.ncu_only:  # an Nsight Compute report alone: no timeline to count on
        return None
    try:
        ops = store.get("gpu_ops")
    except Exception:  # noqa: BLE001 - an input without a GPU timeline: nothing counted
        return None
    w = store.window
    st = ops["start"].to_numpy()
    return int(((st >= w.start_ns) & (st < w.end_ns)).sum())


def finish(store: FactStore, pack: RulePack, *, progress: Progress = None, accepted: AcceptedFindings | None = None,
           keep: Iterable[str] | None = None) -> Analysis:
    """Evaluate ``pack`` over a prepared fact store: the :class:`Analysis` of one trace; findings matching
    ``accepted`` (an :class:`analyzer.accepted.AcceptedFindings`) are marked accepted. ``keep``: the facts
    read from the analysis afterwards (:data:`analyzer.analysis.REPORT_FACTS` for a report); with it, the
    store frees every other fact after the last rule reading it (None: every fact is kept)."""
    trace, window = store.trace, store.window
    from analyzer.loading.capabilities import window_capabilities

    runnable, not_checked = split_by_capability(
        pack, {**trace.info.unavailable, **window_capabilities(window, _ops_in_window(store))})
    noting(progress)(f"{trace.name}: evaluating {len(runnable.rules)} rules")
    latent: dict[str, int] = {}
    findings = _evaluate(runnable, store, keep=keep, latent=latent)
    if accepted is not None:
        from analyzer.accepted import apply_accepted

        findings = apply_accepted(findings, accepted, window)
    analysis = _analysis(store, findings, pack, parameters_of=pack, not_checked=not_checked)
    analysis.latent_impacts = latent
    return analysis


def _evaluate(pack: RulePack, store: FactStore, *, keep: Iterable[str] | None = None,
              latent: dict[str, int] | None = None) -> list[Finding]:
    """The findings of ``pack`` over ``store`` (the "rules" stage). An overflow of 64-bit arithmetic is the
    trace's fault (timestamps or sizes no real trace has), so it becomes one line naming the trace, not
    an error of the rule file. ``keep``: see :func:`finish`; ``latent``: filled with each rule's latent
    impact (:func:`analyzer.rules.engine.evaluate`)."""
    from analyzer.facts.cache import trace_scalars as cached_scalars
    from analyzer.facts.scalars import SCALAR_FACTS
    from analyzer.loading.vocabulary import vocabulary_of
    from analyzer.rules import evaluate
    from analyzer.rules.engine import evaluation_order
    from analyzer.rules.model import RuleEvaluationError
    from analyzer.rules.wording import finding_words, pack_words

    trace = store.trace
    ended = False
    with stage("rules"):
        try:
            threads = fact_threads(trace) if keep is not None else 1
            if keep is not None:  # the scalars, then each rule in order (the engine says when one is done)
                rules = pack.rules  # their reads in the order the engine evaluates them
                store.plan_reads([SCALAR_FACTS, *(rules[i].reads for i in evaluation_order(rules))], keep=keep)
                if threads > 1:
                    store.start_prefetch()
            scalars = cached_scalars(store)  # from the fact cache when its facts are there
            if keep is not None:
                store.done_with(SCALAR_FACTS)
            words = vocabulary_of(trace)  # a ROCm trace's findings name HIP calls and compute units
            findings = evaluate(pack_words(pack, words), store, store.window, scalars, threads=threads,
                                latent=latent)
            ended = True
            return [finding_words(f, words) for f in findings]
        except RuleEvaluationError as err:
            if _caused_by(err, OverflowError):
                raise InputError(trace.info.path, "holds timestamps, durations or sizes too large for 64-bit "
                                 f"arithmetic (while evaluating {getattr(err, 'rule_id', None) or 'a rule'}); "
                                 "the trace looks damaged", hint="export or record it again") from err
            raise
        finally:
            if keep is not None:  # after a failure (or the watchdog's interrupt) without waiting
                store.stop_prefetch(wait=ended)


#: below this many kernels, copies, memsets and API calls a trace's facts and rules run on one thread: each
#: fact then takes a few milliseconds, and handing the GIL between two threads costs more CPU than the
#: second thread saves (10-20% more CPU per trace on the fuzz base traces, at no gain in wall time)
TWO_THREADS_FROM_ROWS = 200_000


def fact_threads(trace: Trace | None = None) -> int:
    """Threads evaluating one trace's rules and facts: 2 where the machine has two cores or more (two
    threads taking the rules in turn, and one computing the next facts while they wait) and ``trace``
    (when given) holds at least :data:`TWO_THREADS_FROM_ROWS` kernels, copies, memsets and API calls, 1
    otherwise; ``ANALYZER_FACT_THREADS=1`` keeps everything on one, ``=2`` uses two on any trace."""
    import os

    raw = os.environ.get("ANALYZER_FACT_THREADS", "").strip()
    if raw.isdigit():
        return max(1, min(int(raw), 2))
    if trace is not None:
        from analyzer.loading.cache import frame_rows

        rows = sum(frame_rows(trace, name) for name in ("kernels", "memcpy", "memset", "api"))
        if rows < TWO_THREADS_FROM_ROWS:
            return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return 2 if cores >= 2 else 1


def _analysis(store: FactStore, findings: list[Finding], pack: RulePack, *, parameters_of: RulePack,
              not_checked: list[NotChecked], not_applicable: tuple[tuple[str, str], ...] = ()) -> Analysis:
    """The :class:`Analysis` of ``store``'s trace: ``pack`` names the rules file, ``parameters_of`` is the
    pack whose parameters are reported."""
    return Analysis(
        trace=store.trace,
        window=store.window,
        findings=findings,
        facts=store,
        rules_file=rules_label(pack),
        parameters=pack_parameters(parameters_of),
        ncu=store.trace.ncu,
        not_checked=not_checked,
        not_applicable=not_applicable,
        graph_kernel_rules=_graph_kernel_rules(pack),
    )


def _graph_kernel_rules(pack: RulePack) -> tuple[str, ...]:
    """:attr:`Analysis.graph_kernel_rules` of ``pack``."""
    from analyzer.facts.registry import FACTS

    return tuple(sorted(r.name for r in pack.rules
                        if r.source in FACTS and FACTS[r.source].per_kernel and "in_graph" not in r.columns))


def pack_parameters(pack: RulePack) -> dict[str, dict[str, object]]:
    """Each rule's parameter values by name, as reports list them."""
    return {r.name: {p.name: p.value for p in r.parameters} for r in pack.rules}


def analyze_loaded(trace: Trace, pack: RulePack | None = None, *, options: AnalysisOptions | None = None,
                   ncu: NcuReport | None = None, progress: Progress = None,
                   accepted: AcceptedFindings | None = None) -> Analysis:
    """Analyze an already loaded :class:`~analyzer.loading.model.Trace` (one rank of a multi-process
    report, a synthetic trace): :func:`prepare` then :func:`finish`. The analysis keeps the facts reports
    read (:data:`~analyzer.analysis.REPORT_FACTS`); the others are freed after their last rule."""
    from analyzer.analysis import REPORT_FACTS

    options = options or AnalysisOptions()
    if pack is None:
        pack = load_rules(options)
    return finish(prepare(trace, options, ncu=ncu, progress=progress), pack, progress=progress, accepted=accepted,
                  keep=REPORT_FACTS)


def split_by_capability(pack: RulePack, unavailable: Mapping[str, str]) -> tuple[RulePack, list[NotChecked]]:
    """The pack without the rules that need data the trace lacks, and those rules as
    :class:`~analyzer.findings.NotChecked` (in pack order)."""
    if not unavailable:
        return pack, []
    keep, skipped = [], []
    for rule in pack.rules:
        missing = rule.missing(unavailable)
        if missing:
            skipped.append(NotChecked(rule=rule.name, id=rule.id, title=rule.title, severity=rule.severity,
                                      missing=missing))
        else:
            keep.append(rule)
    return (replace(pack, rules=tuple(keep)) if skipped else pack), skipped


def noting(progress: Progress) -> Callable[[str], None]:
    """``progress`` that also tells the watchdog where we are."""

    def say(message: str) -> None:
        note(message)
        if progress:
            progress(message)

    return say


def trace_cache(options: AnalysisOptions, *, background: bool = False) -> TraceCache | None:
    from analyzer.loading.cache import TraceCache, enabled_by_env

    # lazy: a trace served from the cache reads each frame when first used (a run whose facts are in the
    # fact cache reads only the few the report shows)
    return TraceCache(background=background, lazy=True) if options.cache and enabled_by_env() else None


#: facts an Nsight Compute report alone can fill; rules reading anything else need a timeline
NCU_FACTS: frozenset[str] = frozenset({"ncu_kernels", "ncu_stalls", "ncu_rules"})
NO_TIMELINE = "needs a timeline (an Nsight Systems trace)"


def analyze_ncu(
    path: Path | str, pack: RulePack | None = None, *, options: AnalysisOptions | None = None, progress: Progress = None,
) -> Analysis:
    """Analyze an Nsight Compute report on its own: the rules over ncu facts run on the profiled
    launches (their impacts from the profiled durations, as their messages say); every other rule is
    listed in ``Analysis.not_applicable`` instead of running on an empty timeline."""
    from analyzer.analysis import Window
    from analyzer.facts import FactStore
    from analyzer.loading.ncu import load_ncu, ncu_trace
    from analyzer.reports.format import plural

    options = options or AnalysisOptions()
    if pack is None:
        pack = load_rules(options)
    if progress:
        progress(f"{Path(path).name}: loading the Nsight Compute report")
    report = load_ncu(Path(path))
    trace = ncu_trace(report)
    kernels = report.kernels
    window = Window(
        start_ns=0, end_ns=int(trace.info.duration_ns), source="ncu",
        description=(f"{plural(len(kernels), 'profiled launch', 'profiled launches')} of "
                     f"{plural(kernels['name'].nunique(), 'kernel')}, back to back; no timeline"),
    )
    applicable = [r for r in pack.rules if set(r.requires) <= NCU_FACTS]
    skipped = tuple((r.name, NO_TIMELINE) for r in pack.rules if not set(r.requires) <= NCU_FACTS)
    ncu_pack = pack.select([r.id for r in applicable]) if len(applicable) != len(pack.rules) else pack
    store = FactStore(trace, window, dict(options.fact_options))
    unread = unread_ncu_metrics(store, ncu_pack)
    if unread:
        names = {n.rule for n in unread}
        ncu_pack = ncu_pack.select([r.id for r in ncu_pack.rules if r.name not in names])
    if progress:
        progress(f"{trace.name}: evaluating {len(ncu_pack.rules)} rules")
    findings = _evaluate(ncu_pack, store) if ncu_pack.rules else []
    return _analysis(store, findings, pack, parameters_of=ncu_pack, not_applicable=skipped, not_checked=unread)


def unread_ncu_metrics(store: FactStore, pack: RulePack) -> list[NotChecked]:
    """Rules over Nsight Compute facts that judge a metric the report holds no value for in any profiled
    launch (every throughput column empty: a metric set without them, or metrics ncu could not read),
    as :class:`~analyzer.findings.NotChecked`: such a rule cannot fire, and its silence is no "no problem"."""
    import pandas as pd

    from analyzer.facts.ncu import NCU_DERIVED_FROM

    out: list[NotChecked] = []
    for rule in pack.rules:
        if rule.source not in NCU_FACTS:
            continue
        frame = store.get(rule.source)
        if frame.empty:
            continue
        judged = set(rule.columns) - set(rule.evidence.columns) - set(rule.key_columns)
        judged |= {src for c in judged for src in NCU_DERIVED_FROM.get(c, ())}
        empty = sorted(c for c in judged if c in frame.columns and pd.api.types.is_numeric_dtype(frame[c])
                       and bool(frame[c].isna().all()))
        if empty:
            why = (f"the report holds no value for {', '.join(empty)} in any of its {len(frame):,} profiled "
                   "launches (left out of the metric set, not readable, or not derivable for this GPU)")
            out.append(NotChecked(rule=rule.name, id=rule.id, title=rule.title, severity=rule.severity,
                                  missing=(("ncu_metrics", why),)))
    return out


def rules_label(pack: RulePack) -> str:
    """How a report names the rule pack: the files it was read from in load order (the built-in one by
    its source-tree name), and the rules switched off, if any."""
    builtin = default_rules_path().resolve()
    parts = []
    for ref in getattr(pack, "files", ()) or (str(getattr(pack, "path", "")),):
        if ref and (ref == "default" or Path(ref).resolve() == builtin):
            parts.append("built-in default pack (rules/default.yaml)")
        elif ref:
            parts.append(shown_path(ref))
    label = " + ".join(parts)
    disabled = getattr(pack, "disabled", ())
    if disabled:
        names = ", ".join(r.name for r in disabled[:8]) + (", ..." if len(disabled) > 8 else "")
        label += f"; {len(disabled)} rule{'s' if len(disabled) != 1 else ''} switched off: {names}"
    return label
