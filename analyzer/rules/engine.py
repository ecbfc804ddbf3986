"""Evaluate a rule pack over a fact store: rows -> scope groups -> findings.

For each rule: read its source fact (only the facts selected rules need are ever computed), filter
rows with ``where``, group them by the scope keys, evaluate ``let`` / ``condition`` / ``impact`` as
one vectorized value per group, and turn each firing group into a :class:`Finding` with capped
evidence. Then link findings (``explains``) whose evidence time intervals overlap, and rank.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from analyzer.analysis import FactSource, Window
from analyzer.findings import Finding, Scope, rank
from analyzer.rules.expr import Env, EvalError, Expr, ExprError
from analyzer.rules.expr import evaluate as eval_expr
from analyzer.rules.footprint import footprint_columns
from analyzer.rules.footprint import footprint, merge_intervals, row_times
from analyzer.rules.model import SCOPES, Rule, RuleEvaluationError, RulePack
from analyzer.rules.templates import render

_SCOPE_FIELDS = {"device": "device", "stream": "stream", "nvtx_path": "nvtx_path", "name": "kernel",
                 "rank": "rank"}


@dataclass(frozen=True)
class _Fired:
    finding: Finding
    intervals: tuple[np.ndarray, np.ndarray] | None  # merged, sorted [start, end) of the group's rows


def builtins_for(window: Window, scalars: Mapping[str, float]) -> dict[str, Any]:
    """Values of :data:`analyzer.rules.model.BUILTINS` for this window and trace."""
    out: dict[str, Any] = {
        "window_ns": window.duration_ns,
        "window_start": window.start_ns,
        "window_end": window.end_ns,
        "setup_ns": window.setup_ns,
    }
    gpus = scalars.get("gpu_count", scalars.get("device_count"))
    if gpus is not None:
        out["gpu_count"] = gpus
    return out


def evaluate(pack: RulePack, store: FactSource, window: Window, scalars: Mapping[str, float], *,
             threads: int = 1, latent: dict[str, int] | None = None,
             known: Mapping[str, list[_Fired]] | None = None) -> list[Finding]:
    """Findings of every rule in ``pack``, linked and ranked. Raises :class:`RuleEvaluationError`
    naming the rule when a rule cannot be evaluated on this trace.

    Rules are evaluated in :func:`evaluation_order` (the readers of the largest fact first). ``threads``
    2: this thread and a second one take them in that order, each the next one not taken (for a store
    whose facts may be read from two threads: a :class:`FactStore`). The findings are the same as on
    one thread, in pack order; when rules fail, the error raised is the first failing rule's in pack
    order (after a failure every rule before it in pack order is still evaluated, none after it).

    ``latent``: when given, filled with each rule's *latent impact*: its impact summed over the groups
    that passed ``where`` but not ``condition`` (time the rule would count had its thresholds been met;
    ``analyze diff`` tells a finding the fix uncovered from one it introduced with it). Rules taken
    from ``known`` add nothing to it.

    ``known``: rule id -> what :func:`fire` gave for that rule on facts equal to this store's (the ncu
    fuzz harness: rules that read no ncu fact give the same on every damaged ncu file); those rules are
    not evaluated again, everything else (linking, ranking) is as if they were."""
    rules = list(pack.rules)
    results: list[list[_Fired] | None] = [None] * len(rules)
    errors: dict[int, BaseException] = {}
    if known:
        for i, rule in enumerate(rules):
            if rule.id in known:
                results[i] = list(known[rule.id])
        rules = [r if results[i] is None else None for i, r in enumerate(rules)]  # type: ignore[misc]
    import threading

    lock = threading.Lock()
    order = evaluation_order(rules)
    taken = [0]

    def next_rule() -> int | None:
        """The next rule to evaluate (its pack index), None when none is left: after a rule failed, only
        rules before it in pack order (the error raised is the first failing rule's in pack order)."""
        with lock:
            while taken[0] < len(order):
                i = order[taken[0]]
                taken[0] += 1
                if rules[i] is not None and not (errors and i > min(errors)):
                    return i
            return None

    if threads <= 1 or len(rules) < 2:
        while (at := next_rule()) is not None:
            try:
                results[at] = _evaluate_one(rules[at], store, window, scalars, latent)  # type: ignore[arg-type]
            except Exception as err:  # noqa: BLE001 - raised in pack order below
                errors[at] = err
    else:
        from analyzer.resources import helpers_may_go_on

        def work(helper: bool = False) -> None:
            while True:
                if helper and not helpers_may_go_on():  # above the helpers' memory limit
                    return
                i = next_rule()
                if i is None:
                    return
                try:
                    results[i] = _evaluate_one(rules[i], store, window, scalars, latent)  # type: ignore[arg-type]
                except Exception as err:  # noqa: BLE001 - raised in pack order below
                    with lock:
                        errors[i] = err

        second = threading.Thread(target=work, args=(True,), name="analyzer-rules", daemon=True)
        second.start()
        try:
            work()
        except BaseException:  # the watchdog's interrupt: the other thread stops after its rule
            with lock:
                taken[0] = len(order)
            raise
        second.join()
    if errors:
        raise errors[min(errors)]
    fired = [item for part in results for item in (part or ())]
    return rank(_link(pack, fired))


def evaluation_order(rules: Sequence[Rule | None]) -> list[int]:
    """The order rules are evaluated in (their findings stay in pack order): first, in pack order, the
    rules reading a fact computed alone (:attr:`analyzer.facts.registry.FactSpec.alone`: the run's
    largest, ``timeline_segments``, 48 M rows at 10 M kernels), then the others in pack order. A fact
    is freed after its last reader (:meth:`analyzer.facts.registry.FactStore.plan_reads`), so the largest
    one is gone before the other rules' facts are built beside it, instead of being held to the last of
    its readers at the end of the pack."""
    from analyzer.facts.registry import all_specs

    specs = all_specs()

    def reads_alone(rule: Rule | None) -> bool:
        return rule is not None and any(name in specs and specs[name].alone for name in rule.reads)

    first = [i for i, rule in enumerate(rules) if reads_alone(rule)]
    return first + [i for i, rule in enumerate(rules) if not reads_alone(rule)]


def fire(rule: Rule, store: FactSource, window: Window, scalars: Mapping[str, float]) -> list[_Fired]:
    """One rule's fired groups before linking and ranking (what ``evaluate(..., known=)`` takes)."""
    return _evaluate_one(rule, store, window, scalars)


def _evaluate_one(rule: Rule, store: FactSource, window: Window, scalars: Mapping[str, float],
                  latent: dict[str, int] | None = None) -> list[_Fired]:
    """One rule's fired groups; a :class:`FactStore` is told when the rule is done with its facts (it
    frees facts after their last rule)."""
    from analyzer.watchdog import stage

    with stage(f"rule {rule.id} ({rule.name})"):
        fired = evaluate_rule(rule, store, window, scalars, latent)
        done_with = getattr(store, "done_with", None)
        if done_with is not None:
            done_with(rule.reads)
    return fired


def evaluate_rule(rule: Rule, store: FactSource, window: Window, scalars: Mapping[str, float],
                  latent: dict[str, int] | None = None) -> list[_Fired]:
    def fail(what: str, cause: BaseException | None = None) -> RuleEvaluationError:
        err = RuleEvaluationError(f"{rule.id} ({rule.name}): {what}", file=rule.file or None, line=rule.line)
        err.rule_id = rule.id
        err.__cause__ = cause
        return err

    try:
        frame = store.get(rule.source)
    except Exception as err:
        raise fail(f'cannot compute fact "{rule.source}": {err}', err) from err
    missing = [c for c in rule.columns if c not in frame.columns]
    if missing:
        raise fail(f'fact "{rule.source}" has no column(s) {", ".join(missing)} on this trace')

    consts: dict[str, Any] = {**dict(scalars), **builtins_for(window, scalars), **rule.params}
    rows = frame.reset_index(drop=True)
    env = Env(consts=consts, rows=rows, fact=store.get)

    def run(field: str, expr: Expr) -> Any:
        try:
            return eval_expr(expr, env)
        except (EvalError, ExprError) as err:
            raise fail(f"{field} ({expr.source.strip()}): {err}", err) from None
        except RuleEvaluationError:
            raise
        except Exception as err:
            raise fail(f"{field} ({expr.source.strip()}): {type(err).__name__}: {err}", err) from err

    if rule.where is not None:
        mask = _per_row(run("where", rule.where), len(rows))
        if not mask.all():  # filtering copies every kept column: only when it drops rows (else the frame as is)
            keep = _kept_columns(rule, rows)
            if keep is not None:  # by position: selecting by a list of names costs ~2 ms on any frame
                wanted = set(keep)
                rows = rows.take([i for i, c in enumerate(rows.columns) if c in wanted], axis=1)
            rows = rows[mask].reset_index(drop=True)
            env.rows = rows
    env.codes, env.keys = _groups(rows, rule)
    ngroups = env.ngroups
    if ngroups == 0:
        return []
    for name, expr in rule.lets:
        env.lets[name] = _per_group(run(f"let.{name}", expr), ngroups)
    fire = _per_group(run("condition", rule.condition), ngroups).fillna(False).astype(bool).to_numpy()
    if not fire.any() and latent is None:
        return []
    impact = None
    if rule.impact is not None:
        try:
            impact = pd.to_numeric(_per_group(run("impact", rule.impact), ngroups), errors="coerce").to_numpy(float)
        except RuleEvaluationError:
            if fire.any():
                raise
            return []  # only the latent impact asked for it: a rule that fires nowhere fails nowhere
        if latent is not None:
            below = impact[~fire]
            below = below[np.isfinite(below) & (below > 0)]
            if len(below):
                latent[rule.name] = latent.get(rule.name, 0) + int(below.sum())
    if not fire.any():
        return []
    return _findings(rule, env, np.flatnonzero(fire), impact, window, fail)


def _kept_columns(rule: Rule, rows: pd.DataFrame) -> list[str] | None:
    """The columns of ``rows`` that the rule still reads after its ``where`` filter, or None (all).

    Filtering copies every column of the kept rows (29 columns x 0.8 M kernels per rule on a
    million-kernel trace: 0.1 s and 180 MB each). The loader records in ``rule.columns`` every
    declared fact column that the rule's expressions, keys and evidence read; the engine also reads
    the columns of finding intervals and footprints (``analyzer.rules.footprint.footprint_columns``). Columns the fact does not declare are kept, so
    name lookups resolve exactly as on the full frame."""
    if not rule.columns:
        return None
    from analyzer.facts.registry import UnknownFactError, get_spec  # lazy: the engine runs on any FactSource

    try:
        declared = set(get_spec(rule.source).columns)
    except UnknownFactError:  # not a registered fact: keep everything
        return None
    # read after the filter: the lets, condition and impact (a column only ``where`` reads is not
    # copied: ``category != "communication"`` used to take a million Arrow strings per kernel rule)
    after = {n for e in (rule.condition, rule.impact, *(e for _, e in rule.lets)) if e is not None for n in e.names}
    needed = {*(c for c in rule.columns if c in after), *rule.key_columns, *rule.evidence.columns,
              *(c for c, _ in rule.evidence.sort), *footprint_columns(declared)}
    keep = [c for c in rows.columns if c in needed or c not in declared]
    return keep if len(keep) < len(rows.columns) else None


def _per_row(value: Any, n: int) -> np.ndarray:
    if isinstance(value, pd.Series):
        return value.fillna(False).astype(bool).to_numpy()
    return np.full(n, bool(value))


def _per_group(value: Any, ngroups: int) -> pd.Series:
    if isinstance(value, pd.Series):
        index = value.index
        if isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
            return value  # already 0..n-1
        return value.reset_index(drop=True)
    return pd.Series([_py(value)] * ngroups)


#: the keys of trace scope's one group (no key columns; read only)
_ONE_GROUP = pd.DataFrame(index=range(1))
#: the (no) keys of a scope over no rows, per scope's key names (read only)
_NO_GROUPS: dict[tuple[str, ...], pd.DataFrame] = {}


def _groups(rows: pd.DataFrame, rule: Rule) -> tuple[np.ndarray, pd.DataFrame]:
    """Group code per row and one row of canonical key values per group (trace scope: one group,
    even with no rows, so that ``count() == 0`` can fire)."""
    canonical = SCOPES[rule.scope]
    if not canonical:
        return np.zeros(len(rows), dtype=np.int64), _ONE_GROUP
    if rows.empty:  # no groups: the rule stops here (read only, one frame per scope)
        keys = _NO_GROUPS.get(canonical)
        if keys is None:
            keys = _NO_GROUPS[canonical] = pd.DataFrame(columns=list(canonical))
        return np.zeros(0, dtype=np.int64), keys
    only = rows[rule.key_columns[0]] if len(rule.key_columns) == 1 else None
    if only is not None and isinstance(only.dtype, np.dtype) and only.dtype.kind in "iub":
        # one integer key (a device, a stream): its sorted distinct values number the groups as the
        # groupby below does (no missing values to place), and each group's first row comes with them
        _, first, codes = np.unique(only.to_numpy(), return_index=True, return_inverse=True)
        codes = codes.reshape(-1).astype(np.int64, copy=False)
    else:
        codes = rows.groupby(list(rule.key_columns), sort=True, dropna=False).ngroup().to_numpy()
        first = np.unique(codes, return_index=True)[1]  # each group's first row (every row has a group: dropna=False)
    keys = rows.iloc[first][list(rule.key_columns)].reset_index(drop=True)
    keys.columns = list(canonical)
    return codes, keys


def _overlap(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool:
    a_start, a_end = a
    b_start, b_end = b
    if len(a_start) == 0 or len(b_start) == 0:
        return False
    idx = np.searchsorted(b_end, a_start, side="right")  # first b interval ending after each a start
    valid = idx < len(b_end)
    return bool(np.any(b_start[idx[valid]] < a_end[valid]))


def _findings(rule: Rule, env: Env, fired: np.ndarray, impact: np.ndarray | None, window: Window,
              fail: Any) -> list[_Fired]:
    rows, codes = env.rows, env.codes
    assert codes is not None and env.keys is not None
    positions = np.flatnonzero(np.isin(codes, fired))
    if rule.evidence.sort and len(positions):
        cols = [c for c, _ in rule.evidence.sort]
        asc = [a for _, a in rule.evidence.sort]
        if not _ascending(rows, cols, asc, positions):  # facts come ordered by start: often no sort at all
            # sort only the key columns (taking every column of a million-row fact first cost ~0.5 s)
            positions = rows[cols].iloc[positions].sort_values(cols, ascending=asc, kind="stable").index.to_numpy()
    group_of = codes[positions]
    order = np.argsort(group_of, kind="stable")
    positions, group_of = positions[order], group_of[order]
    bounds = np.searchsorted(group_of, fired, side="left"), np.searchsorted(group_of, fired, side="right")
    # the fired rows' times, in ``positions`` order: each finding's are a slice (converted once, for the
    # rows that fired only, and shared by its spans and its footprint)
    intervals = row_times(rows, positions)
    window_ns = window.duration_ns
    store_get = env.fact
    out = []
    for i, g in enumerate(fired):
        lo, hi = int(bounds[0][i]), int(bounds[1][i])
        mine = positions[lo:hi]
        times = (intervals[0][lo:hi], intervals[1][lo:hi]) if intervals is not None else None
        keys = {k: _py(v) for k, v in env.keys.iloc[g].items()}
        lets = {name: _py(value.iloc[g]) for name, value in env.lets.items()}
        values = {**{k: _py(v) for k, v in env.consts.items()}, **keys, **lets}
        try:
            message = render(rule.template, values) if rule.template is not None else rule.message
        except ExprError as err:
            raise fail(f"message: {err.message}", err) from None
        impact_ns = None
        if impact is not None and math.isfinite(impact[g]):
            impact_ns = max(0, int(np.rint(impact[g])))
        headline = ""
        if rule.verdict_template is not None:
            try:
                headline = render(rule.verdict_template, values)
            except ExprError as err:
                raise fail(f"verdict: {err.message}", err) from None
        scope = Scope(kind=rule.scope, **{_SCOPE_FIELDS[k]: _scope_value(k, v) for k, v in keys.items()})
        if rule.scope == "device_range" and not scope.nvtx_path:
            # the time outside every range (a trace without NVTX): the device's finding, keyed as one
            scope = replace(scope, nvtx_path=None)
        evidence = rows.iloc[mine[: rule.evidence.limit]][list(rule.evidence.columns)]
        finding = Finding(
            rule=rule.name,
            id=rule.id,
            severity=rule.severity,
            title=rule.title,
            message=message,
            category=rule.category,
            scope=scope,
            impact_ns=impact_ns,
            impact_pct=(impact_ns / window_ns * 100.0) if impact_ns is not None and window_ns > 0 else None,
            evidence_columns=rule.evidence.columns,
            evidence=tuple(tuple(_py(v) for v in row) for row in evidence.itertuples(index=False, name=None)),
            evidence_total=len(mine),
            what=rule.what,
            why=rule.why,
            fix=rule.fix,
            references=rule.references,
            metrics=lets,
            kind=rule.kind,
            headline=headline,
            footprint=(footprint(rows, mine, scope, window, store_get, rule.footprint, rule.source, times=times)
                       if impact_ns is not None and rule.kind == "cause" and store_get is not None else None),
        )
        spans = merge_intervals(*times) if times is not None else None
        out.append(_Fired(finding, spans))
    return out


def _ascending(rows: pd.DataFrame, cols: list[str], asc: list[bool], positions: np.ndarray) -> bool:
    """Whether ``positions`` already list the rows in the order of a stable sort by one ascending
    numeric column (then that sort would return them unchanged)."""
    if len(cols) != 1 or not asc[0]:
        return False
    column = rows[cols[0]]
    if not isinstance(column.dtype, np.dtype) or column.dtype.kind not in "iuf":
        return False
    values = column.to_numpy()[positions]
    return bool((values[1:] >= values[:-1]).all())


def _scope_value(key: str, value: Any) -> Any:
    if value is None:
        return None
    if key in ("device", "stream", "rank"):
        try:
            return int(value)
        except (TypeError, ValueError):
            return None
    return str(value)


def _link(pack: RulePack, fired: list[_Fired]) -> list[Finding]:
    """Fill ``explains`` / ``explained_by``: rule R lists ``explains: [T]``; a finding of R explains a
    finding of T when both fired, they are on the same device (where both have one), and their
    evidence time intervals overlap (or either has no time columns)."""
    by_rule: dict[str, list[int]] = {}
    for i, item in enumerate(fired):
        by_rule.setdefault(item.finding.rule, []).append(i)
    explains: dict[int, list[str]] = {}
    explained_by: dict[int, list[str]] = {}
    known = {r.name: r.name for r in pack.rules} | {r.id: r.name for r in pack.rules}
    for rule in pack.rules:
        for target in rule.explains:
            target_name = known.get(target)
            if target_name is None:  # not in this (restricted) pack, e.g. `rules test` of one rule
                continue
            for i in by_rule.get(rule.name, []):
                for j in by_rule.get(target_name, []):
                    a, b = fired[i], fired[j]
                    da, db = a.finding.scope.device, b.finding.scope.device
                    if da is not None and db is not None and da != db:
                        continue
                    if a.intervals is not None and b.intervals is not None and not _overlap(a.intervals, b.intervals):
                        continue
                    explains.setdefault(i, []).append(b.finding.key)
                    explained_by.setdefault(j, []).append(a.finding.key)
    return [
        replace(item.finding, explains=tuple(explains.get(i, ())), explained_by=tuple(explained_by.get(i, ())))
        for i, item in enumerate(fired)
    ]


def _py(value: Any) -> Any:
    """Plain Python value for messages, evidence and JSON (NaN/NaT -> None)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else value
    if value is pd.NaT or (not isinstance(value, (str, bytes, list, tuple, dict)) and pd.isna(value)):
        return None
    return value
