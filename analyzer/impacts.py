"""How findings add up: the verdict's total, each finding's share of it, and what the causes explain
of a symptom.

A finding's impact is time a fix would recover; two findings can name the same time (fp32 GEMMs that
are also low-occupancy kernels, host synchronizations inside the idle gaps a gap rule reports). The
total is therefore the **union** of the findings' time, never the sum: each finding's impact is spread
evenly over its footprint on the GPU timeline (:class:`analyzer.findings.Footprint`; at most 1 ns per
ns), and where footprints overlap the larger density counts, once. Impact a footprint cannot hold (none
found, or longer than the footprint) is added as it is. Walking the findings in report order, each one
*adds* what the union grows by, so the parts add up exactly to the total.

Symptoms (``kind: symptom``, e.g. low GPU utilization) are not added: a symptom is shown as the share
of it that the causes linked to it (``explains``) account for, their union capped at the symptom's own
impact.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from analyzer.findings import Finding, Severity, rank
from analyzer.arrays import sorted_distinct


def is_problem(f: Finding) -> bool:
    """A counted cause: warning or error, not accepted, not a symptom (these make the verdict's total)."""
    return f.severity >= Severity.WARNING and f.counts and not f.symptom


def is_symptom(f: Finding) -> bool:
    """A counted symptom: warning or error, not accepted, ``kind: symptom``."""
    return f.severity >= Severity.WARNING and f.counts and f.symptom


def report_order(findings: Sequence[Finding]) -> list[Finding]:
    """The order every report lists findings in: the counted causes by impact (so the first row is the
    verdict's biggest), then the symptoms they explain, then the rest (notes, accepted findings), each
    part ranked by :func:`analyzer.findings.rank`."""
    ranked = rank(list(findings))
    return ([f for f in ranked if is_problem(f)] + [f for f in ranked if is_symptom(f)]
            + [f for f in ranked if not is_problem(f) and not is_symptom(f)])


def union_adds(findings: Sequence[Finding]) -> list[int]:
    """What each finding adds to the union of the findings' time, in the order given (ns; 0 for a
    finding without an impact). ``sum()`` of the result is the union. A report needs these once per
    list: it takes them from one :class:`Tally` (:func:`add_up`) instead of asking again."""
    return _union_adds(findings)


def _union_adds(findings: Sequence[Finding]) -> list[int]:
    adds = np.zeros(len(findings), dtype=float)
    placed: dict[int, list[tuple[int, np.ndarray, np.ndarray, float]]] = {}  # device -> (i, start, end, density)
    for i, f in enumerate(findings):
        if f.impact_ns is None or f.impact_ns <= 0:
            continue
        fp = f.footprint
        length = fp.length_ns if fp is not None else 0
        if length <= 0:
            adds[i] += f.impact_ns
            continue
        density = min(1.0, f.impact_ns / length)
        adds[i] += max(0.0, f.impact_ns - length)  # what the footprint cannot hold
        assert fp is not None
        if len(fp.device) and fp.device.min() == fp.device.max():  # one device: no mask, no copies
            placed.setdefault(int(fp.device[0]), []).append((i, fp.start, fp.end, density))
            continue
        for dev in np.unique(fp.device):
            mine = fp.device == dev
            placed.setdefault(int(dev), []).append((i, fp.start[mine], fp.end[mine], density))
    for parts in placed.values():
        bounds = sorted_distinct(np.concatenate([np.r_[s, e] for _, s, e, _ in parts]))
        seg = np.diff(bounds).astype(float)
        best = np.zeros(len(seg))
        for i, start, end, density in parts:
            delta = np.zeros(len(bounds), dtype=np.int64)
            np.add.at(delta, np.searchsorted(bounds, start), 1)
            np.add.at(delta, np.searchsorted(bounds, end), -1)
            covered = np.cumsum(delta)[:-1] > 0
            grown = np.where(covered, np.maximum(best, density), best)
            adds[i] += float(((grown - best) * seg).sum())
            best = grown
    return [int(round(a)) for a in adds]


@dataclass(frozen=True)
class Explained:
    """What the causes linked to a symptom account for: ``parts`` (cause, ns it adds to the union of the
    causes walked in report order), largest first, summing to ``explained_ns`` (at most the symptom's
    impact)."""

    symptom: Finding
    explained_ns: int
    parts: tuple[tuple[Finding, int], ...]

    @property
    def unexplained_ns(self) -> int:
        return max(0, (self.symptom.impact_ns or 0) - self.explained_ns)


def explain(symptom: Finding, findings: Sequence[Finding]) -> Explained:
    """The share of ``symptom`` explained by the counted causes among ``findings`` that it names in
    ``explained_by`` (their union, capped at the symptom's impact)."""
    return _explain(symptom, [f for f in report_order(findings) if is_problem(f)])


def _explain(symptom: Finding, causes: Sequence[Finding]) -> Explained:
    """:func:`explain` given the counted causes in report order."""
    links = set(symptom.explained_by)
    causes = [f for f in causes if f.key in links or f.rule in links]
    cap = symptom.impact_ns or 0
    parts: list[tuple[Finding, int]] = []
    left = cap
    for f, add in zip(causes, union_adds(causes)):
        take = min(add, left)
        left -= take
        if take > 0:
            parts.append((f, take))
    parts.sort(key=lambda p: -p[1])  # largest share first (stable: report order among equals)
    return Explained(symptom, cap - left, tuple(parts))


@dataclass(frozen=True)
class Tally:
    """The findings of one report added up once (:func:`add_up`): the findings in report order, what
    each counted cause adds to the verdict's total (their union), and what explains each counted
    symptom. The verdict, the findings table and the JSON read their numbers from the same tally, so
    they agree, and the unions are computed once per report, by whoever holds the findings."""

    ordered: tuple[Finding, ...]
    causes: tuple[Finding, ...]
    adds: tuple[int, ...]
    explained: tuple[Explained, ...]

    @property
    def total_ns(self) -> int:
        """The union of the counted causes' time (ns)."""
        return sum(self.adds)

    @cached_property
    def _adds_by_id(self) -> dict[int, int]:
        return {id(f): a for f, a in zip(self.causes, self.adds)}

    @cached_property
    def _explained_by_id(self) -> dict[int, Explained]:
        return {id(ex.symptom): ex for ex in self.explained}

    def adds_ns(self, finding: Finding) -> int | None:
        """What ``finding`` adds to the total (None: not a counted cause)."""
        return self._adds_by_id.get(id(finding))

    def explanation(self, symptom: Finding) -> Explained:
        """What the causes explain of ``symptom`` (one of the tallied findings' counted symptoms)."""
        ex = self._explained_by_id.get(id(symptom))
        return ex if ex is not None else _explain(symptom, self.causes)


def add_up(findings: Sequence[Finding]) -> Tally:
    """Adds up ``findings`` (one trace's, or a job's) once: see :class:`Tally`."""
    ordered = report_order(findings)
    causes = [f for f in ordered if is_problem(f)]
    return Tally(tuple(ordered), tuple(causes), tuple(union_adds(causes)),
                 tuple(_explain(s, causes) for s in ordered if is_symptom(s)))
