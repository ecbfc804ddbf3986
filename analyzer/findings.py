"""Findings: what a rule reports. Typed, frozen, JSON-ready (see :meth:`Finding.to_dict`)."""
from __future__ import annotations

import enum
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any


class Severity(enum.IntEnum):
    """Ordered: ``Severity.INFO < Severity.WARNING < Severity.ERROR``."""

    INFO = 0
    WARNING = 1
    ERROR = 2

    @classmethod
    def parse(cls, text: str) -> "Severity":
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r}; use info, warning or error") from None

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Scope:
    """Where a finding applies: ``kind`` in trace|device|stream|nvtx_range|device_range|kernel|rank, plus its key
    (``rank``: the rank of a multi-GPU job, set on every finding of a job's rank)."""

    kind: str
    device: int | None = None
    stream: int | None = None
    nvtx_path: str | None = None
    kernel: str | None = None
    rank: int | None = None  # rank of a multi-GPU job the finding belongs to

    def label(self) -> str:
        parts = [self.kind]
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        if self.device is not None:
            parts.append(f"GPU {self.device}")
        if self.stream is not None:
            parts.append(f"stream {self.stream}")
        if self.nvtx_path:
            parts.append(self.nvtx_path)
        if self.kernel:
            parts.append(self.kernel)
        return " / ".join(parts)


_HEX = re.compile(r"0x[0-9a-fA-F]+")
_LONG_NUMBER = re.compile(r"[0-9]{5,}")
_NUMBER = re.compile(r"[0-9]+")


def stable_scope(scope: Scope) -> dict[str, Any]:
    """The parts of a scope that stay the same when the same program runs again: numbers in NVTX
    paths are counters (``step_3/forward`` -> ``step_#/forward``), hexadecimal addresses and numbers of
    five or more digits (process ids, timestamps, pointers) are dropped from any text; devices, streams
    and short numbers in kernel names (template arguments, tile sizes) are kept."""
    out: dict[str, Any] = {}
    for key, value in sorted(vars(scope).items()):
        if value is None:
            continue
        if isinstance(value, str):
            value = _LONG_NUMBER.sub("#", _HEX.sub("0x#", value))
            if key == "nvtx_path":
                value = _NUMBER.sub("#", value)
            value = " ".join(value.split())
        out[key] = value
    return out


def fingerprint(rule: str, scope: Scope) -> str:
    """16 hex digits naming a finding across reruns of the same program: its rule and the stable part of
    its scope (:func:`stable_scope`); never its message, impact, evidence or any time."""
    text = json.dumps({"rule": rule, "scope": stable_scope(scope)}, sort_keys=True, separators=(",", ":"),
                      default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Acceptance:
    """A finding matched an entry of an accepted-findings file (:mod:`analyzer.accepted`).
    ``counts``: its impact grew past ``max_growth`` since it was accepted, so it counts again."""

    file: str
    reason: str
    recorded_impact_ns: int | None
    growth: float | None  # impact now / impact when accepted (per step when step counts differ)
    max_growth: float
    counts: bool = False

    def note(self) -> str:
        """One line for reports: why the finding is (or is no longer) accepted."""
        then = f" at {self.recorded_impact_ns / 1e6:,.1f} ms" if self.recorded_impact_ns is not None else ""
        if self.counts and self.growth is not None:
            return (f"accepted in {self.file}{then}; its impact is now {self.growth:.1f}x that, more than the "
                    f"{self.max_growth:g}x allowed, so it counts again")
        why = f": {self.reason}" if self.reason else ""
        moved = ""
        if self.growth is not None and abs(self.growth - 1.0) >= 0.05:
            moved = f" (impact now {self.growth:.2f}x what it was{then.replace(' at', ',')})"
        return f"accepted in {self.file}{why}{moved}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "reason": self.reason,
            "recorded_impact_ns": self.recorded_impact_ns,
            "growth": None if self.growth is None else round(self.growth, 4),
            "max_growth": self.max_growth,
            "counts": self.counts,
        }


@dataclass(frozen=True)
class Footprint:
    """Where a finding's time lies on the GPU timeline: sorted, disjoint ``[start, end)`` intervals
    (ns, trace-relative, clipped to the analysis window) per ``device`` (-1: device unknown), ordered by
    (device, start). The verdict's total is the union of the counted findings' footprints
    (:mod:`analyzer.impacts`), so time two findings share is counted once.

    ``source``: how the intervals were found: ``"rows"`` (the time columns of the rows the finding
    grouped: kernels, gaps, copies), ``"host"`` (its rows are host calls: the GPU idle gaps those calls
    overlap) or ``"scope"`` (its rows carry no time: the GPU time of its scope, e.g. the executions of its
    kernel or its device's busy time)."""

    device: Any  # np.ndarray[int64]
    start: Any  # np.ndarray[int64]
    end: Any  # np.ndarray[int64]
    source: str = "rows"

    @property
    def length_ns(self) -> int:
        return int((self.end - self.start).sum()) if len(self.start) else 0

    def __len__(self) -> int:
        return len(self.start)


#: ``Finding.kind``: a cause (what to fix; its impact counts in the verdict's total) or a symptom (what
#: the GPU shows, e.g. low utilization: reported as the share the causes explain, never added)
FINDING_KINDS = ("cause", "symptom")


@dataclass(frozen=True)
class Finding:
    """One diagnosis. ``impact_ns`` is the estimated time a fix would recover (None: not estimable);
    ``impact_pct`` is that as a percentage of the analyzed wall time (the analysis window).

    ``kind`` is ``"cause"`` or ``"symptom"`` (the rule's ``kind:``); ``headline`` the rule's ``verdict:``
    sentence in plain words ("" when the rule has none); ``footprint`` where its time lies on the GPU
    timeline (None: unknown; never serialized)."""

    rule: str  # stable name, e.g. "gpu-idle-gaps"
    id: str  # stable code, e.g. "GPU001"
    severity: Severity
    title: str
    message: str
    category: str
    scope: Scope
    impact_ns: int | None
    impact_pct: float | None
    evidence_columns: tuple[str, ...] = ()
    evidence: tuple[tuple[Any, ...], ...] = ()
    evidence_total: int = 0  # rows before capping (evidence may be capped)
    what: str = ""
    why: str = ""
    fix: str = ""
    references: tuple[str, ...] = ()
    explains: tuple[str, ...] = ()  # anchors (``key``) of findings this one explains
    explained_by: tuple[str, ...] = ()
    metrics: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    acceptance: Acceptance | None = field(default=None, compare=False)
    kind: str = "cause"
    headline: str = ""
    footprint: Footprint | None = field(default=None, compare=False, hash=False, repr=False)

    @property
    def symptom(self) -> bool:
        return self.kind == "symptom"

    @property
    def fingerprint(self) -> str:
        """Stable across reruns of the same program (see :func:`fingerprint`)."""
        return fingerprint(self.rule, self.scope)

    @property
    def counts(self) -> bool:
        """True unless accepted (an accepted finding whose impact grew past its limit counts again)."""
        return self.acceptance is None or self.acceptance.counts

    @property
    def key(self) -> str:
        """Stable anchor: rule name plus a scope suffix (used in HTML anchors and links)."""
        suffix = "-".join(
            str(v) for v in (self.scope.device, self.scope.stream, self.scope.nvtx_path, self.scope.kernel,
                             None if self.scope.rank is None else f"r{self.scope.rank}")
            if v is not None
        )
        raw = f"{self.rule}-{suffix}" if suffix else self.rule
        return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in raw[:120])  # 1:1, so cut first

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "id": self.id,
            "key": self.key,
            "severity": str(self.severity),
            "title": self.title,
            "message": self.message,
            "category": self.category,
            "kind": self.kind,
            "headline": self.headline,
            "scope": {k: v for k, v in vars(self.scope).items() if v is not None},
            "impact_ns": self.impact_ns,
            "impact_pct": self.impact_pct,
            "evidence": {
                "columns": list(self.evidence_columns),
                "rows": [list(r) for r in self.evidence],
                "total_rows": self.evidence_total,
            },
            "what": self.what,
            "why": self.why,
            "fix": self.fix,
            "references": list(self.references),
            "explains": list(self.explains),
            "explained_by": list(self.explained_by),
            "metrics": dict(self.metrics),
            "fingerprint": self.fingerprint,
            "accepted": None if self.acceptance is None else self.acceptance.to_dict(),
        }


@dataclass(frozen=True)
class NotChecked:
    """A rule that was not run because the trace lacks data it needs (e.g. whether copies used pinned
    memory, in a torch.profiler trace from ROCm): the report says so instead of passing silently."""

    rule: str
    id: str
    title: str
    severity: Severity
    missing: tuple[tuple[str, str], ...]  # (capability, why the trace lacks it)

    @property
    def reason(self) -> str:
        return "; ".join(why for _, why in self.missing)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "id": self.id,
            "title": self.title,
            "severity": str(self.severity),
            "missing": [{"capability": c, "reason": why} for c, why in self.missing],
        }


def rank(findings: list[Finding]) -> list[Finding]:
    """Rank by impact (largest first; unknown impact after known), then severity, then id."""
    return sorted(
        findings,
        key=lambda f: (f.impact_ns is None, -(f.impact_ns or 0), -int(f.severity), f.id, f.key),
    )
