"""Accepted findings: a file a team checks in, listing the findings it has decided to live with (fp32 on
purpose, a loader it cannot change yet), so that a pull-request gate fails on new problems only.

    analyze trace.sqlite --write-accepted .gpu/accepted.yaml     # record today's findings
    analyze trace.sqlite --accepted .gpu/accepted.yaml --fail-on warning

A finding matches an entry by its fingerprint (:func:`analyzer.findings.fingerprint`: the rule and the
stable part of its scope, never a time or a duration), so a rerun of the same program matches.
A matched finding is shown as accepted in every report and not counted by ``--fail-on``, unless its
impact grew by more than the entry's ``max-growth`` (default ``--accepted-growth``, 1.5): then it
counts again. Impacts are compared per analysis step when both runs know their step count and it
differs (a longer profile is not a regression), else in total; and the growth must also be at least
1% of the analysis window (so 0.1 ms becoming 0.2 ms is noise, not a regression).

The file (YAML, read with the same safe loader as rule packs; every error names file and line)::

    version: 1
    accepted:
      - rule: fp32-gemm-no-tensor-cores
        scope: {kind: trace}
        fingerprint: 5f0c8d7d2b1e4a96     # derived from rule + scope; checked when present
        impact_ms: 506.574                 # when accepted (growth is measured against it)
        steps: 12                          # analysis steps of that run, when known
        reason: fp32 on purpose until the bf16 port lands
        max-growth: 2                      # optional, this entry only

``--write-accepted FILE`` writes every current finding; the ``reason`` and ``max-growth`` of entries
that still fire are kept, so re-recording after a fix does not lose the team's notes.
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from analyzer._paths import shown_path
from analyzer.errors import ConfigError, RuleError
from analyzer.fileio import atomic_write
from analyzer.findings import Acceptance, Finding, Scope, fingerprint, stable_scope

VERSION = 1
DEFAULT_MAX_GROWTH = 1.5
MIN_GROWTH_SHARE = 0.01  # of the analysis window: smaller increases are noise
TOP_KEYS = ("version", "accepted")
ENTRY_KEYS = ("rule", "scope", "fingerprint", "id", "title", "trace", "impact_ms", "window_ms", "steps",
              "reason", "max-growth")
SCOPE_KEYS = tuple(f.name for f in dataclasses.fields(Scope))
_FINGERPRINT = re.compile(r"^[0-9a-f]{16}$")
KIND = "accepted-findings file"


@dataclass(frozen=True)
class AcceptedEntry:
    rule: str
    scope: Mapping[str, Any]  # the stable scope (analyzer.findings.stable_scope)
    fingerprint: str
    impact_ns: int | None = None
    window_ns: int | None = None
    steps: int | None = None
    reason: str = ""
    max_growth: float | None = None
    line: int = 0
    id: str = ""
    title: str = ""
    trace: str = ""


@dataclass(frozen=True)
class AcceptedFindings:
    path: str  # as messages and reports name it
    entries: Mapping[str, AcceptedEntry]  # by fingerprint
    max_growth: float = DEFAULT_MAX_GROWTH

    def __len__(self) -> int:
        return len(self.entries)


def load_accepted(path: str | Path, *, max_growth: float = DEFAULT_MAX_GROWTH) -> AcceptedFindings:
    """Read and check an accepted-findings file. Raises :class:`ConfigError` naming file and line."""
    from analyzer.errors import did_you_mean
    from analyzer.yamlsafe import LineDict, LineList, load_yaml

    path = Path(path)
    shown = shown_path(path)
    if not path.exists():
        raise ConfigError(f"no such {KIND}", file=shown,
                          hint=f"write one with `analyze TRACE --write-accepted {shown}`")
    if path.is_dir():
        raise ConfigError(f"is a folder, not an {KIND}", file=shown)
    try:
        doc = load_yaml(path, KIND)
    except RuleError as err:  # YAML syntax, aliases, tags, size: already file:line
        raise ConfigError(err.detail, file=shown, line=err.line, hint=err.hint) from None

    def fail(message: str, line: int | None, hint: str | None = None) -> ConfigError:
        return ConfigError(message, file=shown, line=line, hint=hint)

    def unknown(data: LineDict, known: Sequence[str], where: str) -> None:
        for key in data:
            if key not in known:
                raise fail(f'unknown key "{key}" in {where}', data.line_of(key),
                           did_you_mean(str(key), known) or f"keys: {', '.join(known)}")

    if doc is None:
        doc = LineDict()
        doc.line = 1
    if not isinstance(doc, LineDict):
        raise fail(f"an {KIND} is a mapping with `version: 1` and `accepted:`", 1)
    unknown(doc, TOP_KEYS, f"the {KIND}")
    if doc.get("version") != VERSION or isinstance(doc.get("version"), bool):
        raise fail(f"unsupported {KIND} version {doc.get('version')!r}; this analyzer reads version {VERSION}",
                   doc.line_of("version"), f"write `version: {VERSION}` (or rewrite the file with --write-accepted)")
    raw = doc.get("accepted")
    if raw is None:
        raw = LineList()
    if not isinstance(raw, LineList):
        raise fail("`accepted:` must be a list of findings", doc.line_of("accepted"))
    entries: dict[str, AcceptedEntry] = {}
    for index, item in enumerate(raw):
        line = raw.line_of(index)
        where = f"accepted[{index}]"
        if not isinstance(item, LineDict):
            raise fail(f"{where} must be a mapping with rule and scope", line)
        unknown(item, ENTRY_KEYS, where)
        rule = item.get("rule")
        if not isinstance(rule, str) or not rule.strip():
            raise fail(f"{where} needs `rule:` (the rule's name)", line)
        scope_raw = item.get("scope", LineDict())
        if not isinstance(scope_raw, LineDict):
            raise fail(f"{where}.scope must be a mapping such as {{kind: device, device: 0}}", item.line_of("scope"))
        unknown(scope_raw, SCOPE_KEYS, f"{where}.scope")
        for key, value in scope_raw.items():
            ok = isinstance(value, str) if key in ("kind", "nvtx_path", "kernel") else (
                isinstance(value, int) and not isinstance(value, bool))
            if not ok:
                raise fail(f"{where}.scope.{key} must be {'text' if key in ('kind', 'nvtx_path', 'kernel') else 'a whole number'}",
                           scope_raw.line_of(key))
        if "kind" not in scope_raw:
            raise fail(f"{where}.scope needs `kind:` (trace, device, stream, nvtx_range or kernel)",
                       item.line_of("scope"))
        scope = Scope(**scope_raw)
        derived = fingerprint(rule, scope)
        given = item.get("fingerprint")
        if given is not None and (not isinstance(given, str) or given != derived):
            hint = ("16 hex digits" if not isinstance(given, str) or not _FINGERPRINT.match(given)
                    else "the rule or scope was edited: delete the fingerprint line (it is derived from them)")
            raise fail(f"{where}.fingerprint {given!r} does not match its rule and scope (expected {derived})",
                       item.line_of("fingerprint"), hint)
        impact_ms = _number(item, "impact_ms", where, fail, minimum=0.0)
        window_ms = _number(item, "window_ms", where, fail, minimum=0.0)
        steps = _number(item, "steps", where, fail, minimum=1, whole=True)
        growth = _number(item, "max-growth", where, fail, minimum=1.0)
        reason = item.get("reason", "")
        if reason is None:
            reason = ""
        if not isinstance(reason, str):
            raise fail(f"{where}.reason must be text", item.line_of("reason"))
        if derived in entries:
            first = entries[derived]
            raise fail(f"{where} accepts the same finding as the entry at line {first.line} "
                       f"({rule}, {_scope_text(scope_raw)})", line, "keep one of them")
        entries[derived] = AcceptedEntry(
            rule=rule, scope=stable_scope(scope), fingerprint=derived,
            impact_ns=None if impact_ms is None else int(round(impact_ms * 1e6)),
            window_ns=None if window_ms is None else int(round(window_ms * 1e6)),
            steps=None if steps is None else int(steps), reason=reason.strip(),
            max_growth=growth, line=line, id=str(item.get("id", "") or ""),
            title=str(item.get("title", "") or ""), trace=str(item.get("trace", "") or ""),
        )
    return AcceptedFindings(path=shown, entries=entries, max_growth=max_growth)


def _number(item: Any, key: str, where: str, fail: Any, *, minimum: float, whole: bool = False) -> float | None:
    value = item.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
        whole and not float(value).is_integer()) or value < minimum:
        kind = "a whole number" if whole else "a number"
        raise fail(f"{where}.{key} must be {kind} >= {minimum:g}, not {value!r}", item.line_of(key))
    return float(value)


def _scope_text(scope: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in scope.items())


# ---------------------------------------------------------------------------------------------------
# applying


def step_count(window: Any) -> int | None:
    """Loop iterations in the analysis window, when the window knows them (``Window.steps``: a count or
    spans with ``starts``)."""
    steps = getattr(window, "steps", None)
    if steps is None:
        return None
    if isinstance(steps, int):
        return steps or None
    starts = getattr(steps, "starts", None)
    return len(starts) if starts else None


def apply_accepted(findings: Iterable[Finding], accepted: AcceptedFindings, window: Any) -> list[Finding]:
    """``findings`` with those matching an entry marked (:class:`analyzer.findings.Acceptance`)."""
    steps_now = step_count(window)
    window_ns = int(getattr(window, "duration_ns", 0) or 0)
    out = []
    for finding in findings:
        entry = accepted.entries.get(finding.fingerprint)
        if entry is None:
            out.append(finding)
            continue
        growth, limit, counts = judge(entry, accepted, finding.impact_ns, steps_now, window_ns)
        out.append(replace(finding, acceptance=Acceptance(
            file=accepted.path, reason=entry.reason, recorded_impact_ns=entry.impact_ns, growth=growth,
            max_growth=limit, counts=counts,
        )))
    return out


def judge(entry: AcceptedEntry, accepted: AcceptedFindings, impact_ns: int | None, steps_now: int | None,
          window_ns: int) -> tuple[float | None, float, bool]:
    """(growth, limit, counts) of a finding matching ``entry``: its impact now over the recorded one
    (scaled to this run's step count), the entry's limit, and whether it counts again (grew past the
    limit by at least :data:`MIN_GROWTH_SHARE` of the window ``window_ns``)."""
    limit = entry.max_growth or accepted.max_growth
    growth, extra_ns = _growth(entry, impact_ns, steps_now)
    counts = growth is not None and growth > limit and extra_ns >= MIN_GROWTH_SHARE * window_ns
    return growth, limit, counts


def _growth(entry: AcceptedEntry, impact_ns: int | None, steps_now: int | None) -> tuple[float | None, float]:
    """(impact now / impact then, extra ns now) with the recorded impact scaled to this run's step count
    when both are known and differ."""
    if impact_ns is None or entry.impact_ns is None or entry.impact_ns <= 0:
        return None, 0.0
    then = float(entry.impact_ns)
    if entry.steps and steps_now and entry.steps != steps_now:
        then *= steps_now / entry.steps
    return impact_ns / then, impact_ns - then


def unmatched(accepted: AcceptedFindings, findings: Iterable[Finding]) -> list[AcceptedEntry]:
    """Entries no finding matched (fixed, or the rule is off): candidates for removal."""
    seen = {f.fingerprint for f in findings}
    return [e for e in accepted.entries.values() if e.fingerprint not in seen]


# ---------------------------------------------------------------------------------------------------
# writing


HEADER = """\
# Accepted findings for gpu-trace-analyzer: findings this project has decided to live with.
# A finding listed here is reported as accepted and not counted by --fail-on, unless its impact grew
# by more than max-growth (default: --accepted-growth, 1.5) since it was recorded: then it counts again.
# Say why under `reason:`. Rerun --write-accepted to refresh the file: reasons are kept.
# Use: analyze TRACE --accepted {path} --fail-on warning   (or `accepted = "{path}"` in pyproject.toml)
"""


def write_accepted(path: str | Path, analyses: Sequence[Any], previous: AcceptedFindings | None = None) -> int:
    """Write every finding of ``analyses`` as accepted; keep ``reason`` and ``max-growth`` of entries of
    ``previous`` that still fire. Returns the number of entries. The write is atomic."""
    path = Path(path)
    chosen: dict[str, tuple[Finding, Any]] = {}
    for analysis in analyses:
        for finding in analysis.findings:
            known = chosen.get(finding.fingerprint)
            if known is None or (finding.impact_ns or 0) > (known[0].impact_ns or 0):
                chosen[finding.fingerprint] = (finding, analysis)
    records = []
    for fp, (finding, analysis) in sorted(chosen.items(), key=lambda kv: (kv[1][0].rule, kv[0])):
        old = previous.entries.get(fp) if previous is not None else None
        record: dict[str, Any] = {
            "rule": finding.rule,
            "scope": _scope_order(stable_scope(finding.scope)),
            "fingerprint": fp,
            "id": finding.id,
            "title": finding.title,
            "trace": analysis.trace.name,
            "impact_ms": None if finding.impact_ns is None else round(finding.impact_ns / 1e6, 3),
            "window_ms": round(analysis.window.duration_ns / 1e6, 3),
        }
        steps = step_count(analysis.window)
        if steps:
            record["steps"] = steps
        record["reason"] = old.reason if old is not None else ""
        if old is not None and old.max_growth is not None:
            record["max-growth"] = old.max_growth
        records.append(record)
    body = yaml.safe_dump({"version": VERSION, "accepted": records}, sort_keys=False, allow_unicode=True,
                          width=110, default_flow_style=None)
    text = HEADER.format(path=shown_path(path)) + body
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text)
    return len(records)


def _scope_order(scope: Mapping[str, Any]) -> dict[str, Any]:
    """``kind`` first, then the keys in Scope's field order (readable: {kind: device, device: 0})."""
    return {k: scope[k] for k in SCOPE_KEYS if k in scope}
