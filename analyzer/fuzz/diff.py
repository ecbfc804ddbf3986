"""Fuzzing ``analyze diff`` on damaged JSON reports (the baselines CI keeps and compares against).

The bases are JSON reports written by this analyzer from real traces (``tests/data``: the
dataloader-starved workload and its fixed twin, so that a diff has steps, phases, kernels, copies and
findings that differ). A case damages one side or both: one to four mutations of the parsed document
at a point picked anywhere in its tree (a key dropped; a value set to null, text, a negative or huge
number, a float, a boolean, a list, an object, a 100 kB or unpaired-surrogate string; a value wrapped
in a list; a list emptied, reversed, or one element duplicated; ``schema_version`` or ``tool`` changed;
the baseline's step names and durations made to disagree), then written as JSON that is sometimes
truncated, has bytes flipped, invalid UTF-8, a byte-order mark, 10,000-deep nesting or trailing
garbage. Each case runs the real ``analyze diff BASE HEAD`` command (all three formats written) under
:func:`analyzer.cli.guarded`: exit 0/1 with the reports, or exit 2 with one line naming the damaged
file. The inputs must be byte-identical afterwards.
"""
from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyzer.fuzz.harness import (
    CASE_TIMEOUT_S,
    FuzzFailure,
    Outcome,
    check_outcome,
    damage_json_text,
    run_guarded,
    sha256,
)

#: the real traces the base reports are written from (BASE, HEAD of an undamaged diff)
SOURCES = ("dataloader_starved", "dataloader_starved_fixed")

VALUES: dict[str, Any] = {
    "null": None, "text": "abc", "numeric-text": "123", "negative": -5, "zero": 0, "huge": 1e308,
    "bigint": 2**70, "minus-bigint": -(2**70), "float": 0.5, "list": [1, 2], "dict": {"a": 1},
    "bool": True, "empty": "", "long-text": "k" * 100_000, "surrogate": "x\udcff", "nan": float("nan"),
    "inf": float("inf"), "empty-list": [], "empty-dict": {}, "version-2": "2.0", "version-0": "1.0",
}
TEXT_DAMAGE = ("truncate", "flip", "invalid-utf8", "bom", "deep-nesting", "trailing-garbage", "empty")


@dataclass(frozen=True)
class ReportMutation:
    """``op`` applied at the ``where``-th point (modulo the count) of a walk over the document; points
    under ``traces[0].baseline`` are picked four times in five, since that is what a diff reads."""

    op: str
    where: int
    arg: str = "null"
    focus: bool = True

    def __str__(self) -> str:
        return f"{self.op}@{self.where}{'b' if self.focus else ''}:{self.arg}"


def _points(node: Any, path: tuple[Any, ...] = (), out: list[tuple[Any, ...]] | None = None,
            depth: int = 0) -> list[tuple[Any, ...]]:
    """Every path to a value in ``node`` (lists: their first 5 and last element only)."""
    out = [] if out is None else out
    if depth > 12:
        return out
    if isinstance(node, dict):
        for key, value in node.items():
            out.append((*path, key))
            _points(value, (*path, key), out, depth + 1)
    elif isinstance(node, list):
        idx = list(range(min(5, len(node))))
        if len(node) > 5:
            idx.append(len(node) - 1)
        for i in idx:
            out.append((*path, i))
            _points(node[i], (*path, i), out, depth + 1)
    return out


def _parent(doc: Any, path: tuple[Any, ...]) -> tuple[Any, Any]:
    node = doc
    for key in path[:-1]:
        node = node[key]
    return node, path[-1]


def apply(doc: Any, m: ReportMutation) -> Any:
    """``doc`` with ``m`` applied (in place where possible; the new document is returned)."""
    points = _points(doc)
    if m.focus:
        focused = [p for p in points if p[:3] == ("traces", 0, "baseline")]
        points = focused or points
    if m.op == "steps-disagree":  # names and durations of different lengths, or negative durations
        try:
            steps = doc["traces"][0]["baseline"]["steps"]
            if m.arg == "negative":
                steps["durations_ns"] = [-abs(int(d)) for d in steps["durations_ns"]]
            else:
                steps["names"] = steps["names"][:-1]
        except (KeyError, IndexError, TypeError, ValueError):
            pass
        return doc
    if m.op == "top" :
        if isinstance(doc, dict):
            doc["schema_version" if m.arg.startswith("version") else "tool"] = copy.deepcopy(VALUES[m.arg])
        return doc
    if not points:
        return copy.deepcopy(VALUES[m.arg]) if m.op == "set" else doc
    parent, key = _parent(doc, points[m.where % len(points)])
    value = parent[key]
    if m.op == "drop":
        del parent[key]
    elif m.op == "set":
        parent[key] = copy.deepcopy(VALUES[m.arg])
    elif m.op == "wrap":
        parent[key] = [value]
    elif m.op == "empty" and isinstance(value, (list, dict)):
        parent[key] = type(value)()
    elif m.op == "reverse" and isinstance(value, list):
        parent[key] = value[::-1]
    elif m.op == "duplicate" and isinstance(value, list) and value:
        parent[key] = [*value, copy.deepcopy(value[0])]
    elif m.op == "stringify" and isinstance(value, (int, float)) and not isinstance(value, bool):
        parent[key] = str(value)
    return doc


def serialize(doc: Any, damage: tuple[str, float] | None) -> bytes:
    return damage_json_text(json.dumps(doc, ensure_ascii=False, indent=1).encode("utf-8", "surrogatepass"), damage)


def mutation_strategy() -> Any:
    """Mostly value changes and list edits anywhere in the tree (many of which a diff can still read);
    whole-report damage (another schema, steps that disagree) one time in ten."""
    from hypothesis import strategies as st

    where = st.integers(0, 10_000)
    focus = st.sampled_from([True, True, True, True, False])
    values = st.sampled_from(list(VALUES))
    value_edit = st.builds(ReportMutation, st.just("set"), where, values, focus)
    list_edit = st.builds(ReportMutation, st.sampled_from(["drop", "wrap", "empty", "reverse", "duplicate",
                                                           "duplicate", "reverse", "stringify"]),
                          where, focus=focus)
    whole = st.one_of(
        st.builds(ReportMutation, st.just("steps-disagree"), st.just(0), st.sampled_from(["length", "negative"])),
        st.builds(ReportMutation, st.just("top"), st.just(0),
                  st.sampled_from(["version-2", "version-0", "null", "text", "dict", "bigint"])))
    return st.sampled_from([0] * 9 + [1] * 9 + [2] * 2).flatmap(lambda k: (value_edit, list_edit, whole)[k])


def side_strategy() -> Any:
    """(mutations, text damage) for one side; no mutation and no damage leaves it intact."""
    from hypothesis import strategies as st

    damage = st.one_of(*[st.none()] * 9, st.tuples(st.sampled_from(TEXT_DAMAGE), st.floats(0, 0.999)))
    return st.tuples(st.lists(mutation_strategy(), min_size=0, max_size=3), damage)


def base_reports(workdir: Path) -> dict[str, str]:
    """The JSON reports of :data:`SOURCES` (their text), written once per process by the real pipeline."""
    from analyzer.pipeline import AnalysisOptions, analyze_paths, load_rules
    from analyzer.reports import build_report, render
    from analyzer.testing import real_trace

    options = AnalysisOptions()
    pack = load_rules(options)
    docs = {}
    for name in SOURCES:
        analyses = analyze_paths([real_trace(name)], options, pack=pack)
        docs[name] = render(build_report(analyses), "json")
    return docs


class Runner:
    def __init__(self, workdir: Path, timeout: float = CASE_TIMEOUT_S) -> None:
        self.workdir = workdir
        self.timeout = timeout
        self.docs = base_reports(workdir)
        self.packs: dict[tuple[str, str, tuple[str, ...]], Any] = {}

    def run_diff(self, base: Path, head: Path, out: Path) -> Outcome:
        """``analyze diff BASE HEAD`` (the command's own entry point under ``guarded``), with the rule pack
        it loads read once per process: the other harnesses share one loaded pack too, and these cases
        damage reports, not packs (the ``rules`` harness fuzzes those)."""
        from unittest import mock

        from analyzer import pipeline
        from analyzer.diff.cli import diff

        args = [str(base), str(head), "-q", "--timeout", str(self.timeout),
                "-o", str(out / "diff.json"), "-o", str(out / "diff.md"), "-o", str(out / "diff.html")]
        with mock.patch.object(pipeline, "load_rules", self._load_rules):
            return run_guarded(lambda: diff.main(args=args, prog_name="analyze diff", standalone_mode=False))

    def _load_rules(self, options: Any) -> Any:
        """:func:`analyzer.pipeline.load_rules`, remembered per (packs, rule settings, --set values)."""
        from analyzer.trace_analysis import load_rules

        key = (repr(options.packs), repr(options.rule_settings), tuple(options.sets))
        if key not in self.packs:
            self.packs[key] = load_rules(options)
        return self.packs[key]

    def case(self, sides: list[tuple[list[ReportMutation], tuple[str, float] | None]], index: int = 0) -> Outcome:
        folder = self.workdir / f"diff{index % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        out = self.workdir / "diff-out"
        out.mkdir(exist_ok=True)
        paths, hashes = [], []
        for side, (name, (mutations, damage)) in enumerate(zip(SOURCES, sides)):
            doc = json.loads(self.docs[name])  # a fresh copy: parsing is several times faster than deepcopy
            for m in mutations:
                doc = apply(doc, m)
            path = folder / f"{'base' if side == 0 else 'head'}-damaged.json"
            path.write_bytes(serialize(doc, damage))
            paths.append(path)
            hashes.append(sha256(path))
        listing = sorted(os.listdir(folder))
        outcome = self.run_diff(paths[0], paths[1], out)
        try:
            check_outcome(outcome, names=[p.name for p in paths])
            if [sha256(p) for p in paths] != hashes or sorted(os.listdir(folder)) != listing:
                raise FuzzFailure("an input file or its folder changed")
            if outcome.rc in (0, 1):
                for fmt in ("json", "md", "html"):
                    if not (out / f"diff.{fmt}").stat().st_size:
                        raise FuzzFailure(f"exit {outcome.rc} but the {fmt} report is empty")
        except FuzzFailure as err:
            desc = [([str(m) for m in ms], dmg) for ms, dmg in sides]
            raise FuzzFailure(f"{err} [sides {desc}]") from None
        return outcome


def run_cases(n: int, seed: int, workdir: Path, *, stats: Any = None, derandomize: bool = False) -> Any:
    """``n`` hypothesis-generated cases (seeded); stops at the first failure (after shrinking it)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed

    from analyzer.fuzz.harness import Stats

    stats = stats or Stats("diff", seed=seed)
    runner = Runner(workdir)

    @settings(max_examples=n, deadline=None, derandomize=derandomize, database=None, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(side_strategy(), side_strategy())
    def one(base: Any, head: Any) -> None:
        stats.stop_if_out_of_time()
        outcome = runner.case([base, head], stats.cases)
        stats.record(outcome, names=["base-damaged.json", "head-damaged.json"])

    if not derandomize:
        one = hseed(seed)(one)
    one()
    return stats
