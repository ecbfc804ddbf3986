"""Rule pack data model: frozen dataclasses built by :func:`analyzer.rules.loader.load_pack`."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyzer.errors import ParameterError, RuleError
from analyzer.findings import Severity
from analyzer.rules.expr import Expr, did_you_mean

if TYPE_CHECKING:
    from analyzer.rules.templates import MessageTemplate

#: scope -> canonical group keys (also the names messages and group expressions read)
SCOPES: dict[str, tuple[str, ...]] = {
    "trace": (),
    "device": ("device",),
    "stream": ("device", "stream"),
    "nvtx_range": ("nvtx_path",),
    "device_range": ("device", "nvtx_path"),  # an NVTX range (or phase) on one GPU
    "kernel": ("name",),
    "rank": ("rank",),  # a rank of a multi-GPU job (job facts)
}
CATEGORIES: tuple[str, ...] = (
    "utilization", "launch", "memory", "sync", "kernel", "transfer", "setup", "occupancy", "nvtx",
    "communication", "cpu", "general",
)
#: window-derived values every expression can read (ns, trace-relative)
BUILTINS: dict[str, str] = {
    "window_ns": "length of the analysis window (ns)",
    "window_start": "start of the analysis window (ns from trace origin)",
    "window_end": "end of the analysis window (ns from trace origin)",
    "setup_ns": "time before the window classified as one-time setup (ns)",
    "gpu_count": "GPUs with activity (the scalar gpu_count, else device_count)",
}
#: per-trace scalars the pipeline passes to :func:`analyzer.rules.engine.evaluate` (``scalars=``).
#: Rules are validated against these names; a rule reading one the pipeline did not provide fails
#: with a RuleEvaluationError naming the rule and the scalar.
SCALARS: dict[str, str] = {
    "gpu_count": "GPUs with any activity in the trace",
    "kernel_count": "kernels in the window",
    "kernel_time_ns": "summed kernel durations in the window (ns; concurrent kernels add up)",
    "gpu_busy_ns": "union of kernel/memcpy/memset intervals in the window, summed over GPUs (ns)",
    "memcpy_time_ns": "summed memcpy durations in the window (ns)",
    "memcpy_bytes": "bytes copied by memcpy in the window",
    "memset_time_ns": "summed memset durations in the window (ns)",
    "trace_ns": "length of the whole trace (ns)",
}


def known_scalars() -> dict[str, str]:
    """:data:`SCALARS` plus the scalars the facts layer documents (``analyzer.facts.scalars``)."""
    names = dict(SCALARS)
    try:
        from analyzer.facts.scalars import SCALAR_DOCS
    except ImportError:  # facts layer without scalars: only ours
        return names
    names.update({k: v for k, v in SCALAR_DOCS.items() if k not in BUILTINS})
    return names


class RuleEvaluationError(RuleError):
    """A valid rule failed on this trace (a fact could not be computed, a scalar is missing...)."""


@dataclass(frozen=True)
class Parameter:
    """A tunable threshold. ``value`` is the current (possibly ``--set``) normalized value."""

    name: str
    unit: str  # see analyzer.rules.units.UNITS
    default: Any  # normalized (ns, fraction, bytes, number, count, text)
    value: Any
    doc: str
    text: str  # current value as written (``1ms``)
    default_text: str
    minimum: Any = None
    maximum: Any = None
    regex: bool = False  # a text parameter used as a matches() pattern


@dataclass(frozen=True)
class Evidence:
    columns: tuple[str, ...] = ()
    sort: tuple[tuple[str, bool], ...] = ()  # (column, ascending)
    limit: int = 10


def _search_folders(pack_file: str, roots: Sequence[Path]) -> list[Path]:
    """Where a test case's relative paths are looked up, in order: ``roots``, the pack's folder and its
    parents (the repository root), the CWD."""
    base = Path(pack_file).resolve().parent
    return [*roots, base, *base.parents, Path.cwd()]


@dataclass(frozen=True)
class RuleTest:
    """A test case: analyzing ``trace`` must make the rule fire (or stay silent)."""

    trace: str  # as written: relative to the pack file or to a parent of it (repo root)
    expect: str  # "fire" | "silent"
    sets: tuple[str, ...] = ()
    window: str | None = None
    note: str = ""
    line: int = 0
    ncu: tuple[str, ...] = ()  # Nsight Compute exports joined to the trace (same resolution as trace)

    def resolve(self, pack_file: str, name: str | None = None, roots: Sequence[Path] = ()) -> Path | None:
        """The trace file (or ``name``, e.g. one of ``ncu``): absolute, under one of ``roots`` (e.g. a
        clone of the repository, for the built-in pack's cases from an installed package), next to the
        pack, in a parent of it, or under the CWD."""
        path = Path(self.trace if name is None else name)
        if path.is_absolute():
            return path if path.exists() else None
        for folder in _search_folders(pack_file, roots):
            if (folder / path).exists():
                return folder / path
        return None

    def resolve_all(self, pack_file: str, roots: Sequence[Path] = ()) -> list[Path]:
        """The trace files: one, or, when ``trace`` is a glob (``ranks/r*.sqlite.xz``: the rank files
        of one multi-GPU job), every match in the first folder (as in :meth:`resolve`) that has any."""
        if not any(ch in self.trace for ch in "*?["):
            one = self.resolve(pack_file, roots=roots)
            return [one] if one is not None else []
        path = Path(self.trace)
        if path.is_absolute():
            return sorted(Path(path.anchor).glob(str(path.relative_to(path.anchor))))
        for folder in _search_folders(pack_file, roots):
            hits = sorted(folder.glob(self.trace))
            if hits:
                return hits
        return []


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    title: str
    category: str
    severity: Severity
    scope: str
    source: str
    key_columns: tuple[str, ...]  # source columns grouped by (canonical names: SCOPES[scope])
    parameters: tuple[Parameter, ...]
    where: Expr | None
    lets: tuple[tuple[str, Expr], ...]
    condition: Expr
    impact: Expr | None
    evidence: Evidence
    message: str
    what: str
    why: str  # speaks to the reader about their trace (rendered in every report)
    fix: str
    #: how the rule was calibrated: which real traces, what they measured (docs/rules.md and
    #: ``analyze rules explain`` only, never a report)
    calibration: str = ""
    references: tuple[str, ...] = ()
    explains: tuple[str, ...] = ()  # rule names
    #: "cause" (what to fix: its impact counts in the verdict's total) or "symptom" (what the GPU shows,
    #: e.g. low utilization: reported as the share of it the causes explain, never added to the total)
    kind: str = "cause"
    #: the finding's headline in plain words, a template like ``message`` (the verdict leads with the
    #: biggest cause's), e.g. "host-bound: the GPU waited for Python ... {{ share | pct }} of the time"
    verdict: str = ""
    verdict_template: MessageTemplate | None = field(default=None, compare=False, repr=False)
    #: where the impact lies on the GPU timeline (analyzer.rules.footprint.FOOTPRINTS): "auto" (from the
    #: rows) or "idle_before" (the idle gap before each row's op: launch overhead)
    footprint: str = "auto"
    #: facts the findings' footprints read beyond ``requires`` (analyzer.rules.footprint.footprint_reads)
    footprint_reads: tuple[str, ...] = ()
    tests: tuple[RuleTest, ...] = ()
    file: str = ""
    line: int = 0
    columns: tuple[str, ...] = ()  # source columns the rule reads (checked on the real frame)
    template: MessageTemplate | None = field(default=None, compare=False, repr=False)
    # trace capabilities (analyzer.loading.capabilities.CAPABILITIES) the rule needs: those its `needs:`
    # lists plus those the facts and columns its expressions read declare; on a trace lacking one the
    # rule is not run and the report says it is not available in this trace
    needs: tuple[str, ...] = ()

    def missing(self, unavailable: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """(capability, why the trace lacks it) for each capability this rule needs that is unavailable."""
        return tuple((c, unavailable[c]) for c in self.needs if c in unavailable)

    def __getstate__(self) -> dict[str, Any]:
        """Pickling (a rule pack sent to Dask workers): the compiled message template does not
        pickle, so its source (the message) travels and is compiled again on arrival."""
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        state["template"] = None
        state["_has_template"] = self.template is not None
        state["verdict_template"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        has = state.pop("_has_template", False)
        for key, value in state.items():
            object.__setattr__(self, key, value)
        if has:
            from analyzer.rules.templates import recompile

            object.__setattr__(self, "template", recompile(self.message))
        if self.verdict:
            from analyzer.rules.templates import recompile

            object.__setattr__(self, "verdict_template", recompile(self.verdict))

    @property
    def expressions(self) -> list[tuple[str, Expr]]:
        """(field, expression) pairs in evaluation order, e.g. ("let.share", ...)."""
        out: list[tuple[str, Expr]] = [("where", self.where)] if self.where else []
        out += [(f"let.{n}", e) for n, e in self.lets]
        out.append(("condition", self.condition))
        if self.impact is not None:
            out.append(("impact", self.impact))
        return out

    @property
    def requires(self) -> tuple[str, ...]:
        """Facts this rule reads: its source plus any fact_*() arguments."""
        extra = sorted({f for _, e in self.expressions for f in e.facts} - {self.source})
        return (self.source, *extra)

    @property
    def reads(self) -> tuple[str, ...]:
        """Every fact evaluating the rule reads: ``requires`` plus what its findings' footprints read."""
        return (*self.requires, *(f for f in self.footprint_reads if f not in self.requires))

    @property
    def params(self) -> dict[str, Any]:
        return {p.name: p.value for p in self.parameters}

    def parameter(self, name: str) -> Parameter:
        for param in self.parameters:
            if param.name == name:
                return param
        known = ", ".join(p.name for p in self.parameters) or "none"
        raise ParameterError(
            f'rule {self.name} has no parameter "{name}" (parameters: {known})',
            hint=did_you_mean(name, [p.name for p in self.parameters]),
        )

    def with_parameter(self, param: Parameter) -> Rule:
        return replace(self, parameters=tuple(param if p.name == param.name else p for p in self.parameters))


@dataclass(frozen=True)
class RulePack:
    """The rules one analysis evaluates (``rules``), composed from one or more pack files.

    ``disabled`` holds rules that are defined but switched off (a pack's ``disable:``, ``--ignore``,
    or not picked by ``--select``); ``--set`` and ``--select`` still reach them, the engine never
    runs them. ``reasons`` says, per disabled rule id, what switched it off. ``files`` are the pack
    files read, in load order (extended packs first)."""

    rules: tuple[Rule, ...]
    path: str = ""
    version: int = 1
    disabled: tuple[Rule, ...] = ()
    files: tuple[str, ...] = ()
    reasons: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __iter__(self) -> Any:
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    @property
    def all_rules(self) -> tuple[Rule, ...]:
        """Enabled and disabled rules, in definition order (files in load order, then line)."""
        order = {f: i for i, f in enumerate(self.files)}
        both = (*self.rules, *self.disabled)
        return tuple(sorted(both, key=lambda r: (order.get(r.file, len(order)), r.line)))

    def get(self, name_or_id: str) -> Rule:
        """A rule by name or id (case-insensitive id), enabled or not; ParameterError with did-you-mean
        otherwise."""
        for rule in (*self.rules, *self.disabled):
            if name_or_id in (rule.name, rule.id) or name_or_id.upper() == rule.id:
                return rule
        every = (*self.rules, *self.disabled)
        known = [r.name for r in every] + [r.id for r in every]
        raise ParameterError(
            f'unknown rule "{name_or_id}"',
            hint=did_you_mean(name_or_id, known) or f"rules: {', '.join(r.name for r in every)}",
        )

    def is_enabled(self, name_or_id: str) -> bool:
        return self.get(name_or_id) in self.rules

    def select(self, names_or_ids: Iterable[str]) -> RulePack:
        """The pack restricted to the given rules (definition order kept; disabled ones may be named)."""
        wanted = {self.get(n).id for n in names_or_ids}
        return replace(self, rules=tuple(r for r in self.all_rules if r.id in wanted), disabled=())

    def replace_rule(self, rule: Rule) -> RulePack:
        return replace(
            self,
            rules=tuple(rule if r.id == rule.id else r for r in self.rules),
            disabled=tuple(rule if r.id == rule.id else r for r in self.disabled),
        )

    def with_enabled(self, ids: Iterable[str], reasons: Mapping[str, str] | None = None) -> RulePack:
        """The same rules with exactly ``ids`` enabled (definition order); ``reasons`` for the others."""
        keep = set(ids)
        every = self.all_rules
        return replace(
            self,
            rules=tuple(r for r in every if r.id in keep),
            disabled=tuple(r for r in every if r.id not in keep),
            reasons={k: v for k, v in {**self.reasons, **(reasons or {})}.items() if k not in keep},
        )

    @property
    def requires(self) -> tuple[str, ...]:
        return tuple(sorted({f for r in self.rules for f in r.requires}))

    def parameters(self) -> Mapping[str, dict[str, Any]]:
        """``{rule name: {param: value}}`` as used (for reports)."""
        return {r.name: r.params for r in self.rules}
