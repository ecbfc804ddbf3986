"""Findings: what a rule reports. Typed, frozen, JSON-ready (see :meth:`Finding.to_dict`)."""
from __future__ import annotations

import enum
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
    """Where a finding applies: ``kind`` in trace|device|stream|nvtx_range|kernel, plus its key."""

    kind: str
    device: int | None = None
    stream: int | None = None
    nvtx_path: str | None = None
    kernel: str | None = None

    def label(self) -> str:
        parts = [self.kind]
        if self.device is not None:
            parts.append(f"GPU {self.device}")
        if self.stream is not None:
            parts.append(f"stream {self.stream}")
        if self.nvtx_path:
            parts.append(self.nvtx_path)
        if self.kernel:
            parts.append(self.kernel)
        return " / ".join(parts)


@dataclass(frozen=True)
class Finding:
    """One diagnosis. ``impact_ns`` is the estimated time a fix would recover (None: not estimable);
    ``impact_pct`` is that as a percentage of the analyzed wall time (the analysis window)."""

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

    @property
    def key(self) -> str:
        """Stable anchor: rule name plus a scope suffix (used in HTML anchors and links)."""
        suffix = "-".join(
            str(v) for v in (self.scope.device, self.scope.stream, self.scope.nvtx_path, self.scope.kernel)
            if v is not None
        )
        raw = f"{self.rule}-{suffix}" if suffix else self.rule
        return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in raw)[:120]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "id": self.id,
            "key": self.key,
            "severity": str(self.severity),
            "title": self.title,
            "message": self.message,
            "category": self.category,
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
        }


def rank(findings: list[Finding]) -> list[Finding]:
    """Rank by impact (largest first; unknown impact after known), then severity, then id."""
    return sorted(
        findings,
        key=lambda f: (f.impact_ns is None, -(f.impact_ns or 0), -int(f.severity), f.id, f.key),
    )
