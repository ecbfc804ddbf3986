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
    finding without an impact). ``sum()`` of the result is the union. A report asks twice for the same
    findings (the verdict's total and each row's part; each symptom's causes): the answers of the last
    few calls are kept for the same objects (findings are frozen; footprints are bounded by
    :data:`analyzer.rules.footprint.MAX_INTERVALS`)."""
    for seen, adds in list(_RECENT_UNIONS):
        if len(seen) == len(findings) and all(a is b for a, b in zip(seen, findings)):
            return list(adds)
    out = _union_adds(findings)
    _RECENT_UNIONS.append((tuple(findings), tuple(out)))
    del _RECENT_UNIONS[:-_RECENT_MAX]
    return out


#: the last :data:`_RECENT_MAX` :func:`union_adds` calls as ``(findings, adds)``
_RECENT_UNIONS: list[tuple[tuple[Finding, ...], tuple[int, ...]]] = []
_RECENT_MAX = 4


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
    links = set(symptom.explained_by)
    causes = [f for f in report_order(findings) if is_problem(f) and (f.key in links or f.rule in links)]
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
