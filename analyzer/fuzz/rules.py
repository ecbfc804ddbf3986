"""Fuzzing the rule language: rule packs built from the real default pack's rules, then damaged.

A case takes one to three rules of ``analyzer/rules/packs/default.yaml`` and changes them: keys removed
or set to values of any YAML type; ``where`` / ``let`` / ``condition`` / ``impact`` replaced by
expressions generated from the language's grammar (the fact's real columns, lets, parameters, unit
literals, every function, operators, deep nesting) or by random text; messages replaced by generated
Jinja (every filter, ``if``, comparisons, unknown names, broken tags); parameters with odd values,
units and bounds; evidence specs with unknown columns, odd sorts and limits; unknown scopes,
severities, sources and ``explains``. The pack is written as YAML (sometimes damaged as text: tabs,
anchors and aliases, tags, deep nesting, truncation, invalid UTF-8) and then loaded, validated and
evaluated on a real trace, and the report rendered, exactly as ``analyze --rules FILE`` would.
"""
from __future__ import annotations

import copy
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from analyzer.fuzz.harness import CASE_TIMEOUT_S, FuzzFailure, Outcome, check_outcome, run_guarded, sha256

AGGREGATES = ("count", "sum", "mean", "median", "min", "max", "p", "any", "all", "share", "nunique", "first")
ELEMENTWISE = ("abs", "sqrt", "log10", "clip", "min", "max")
TEXT_FUNCS = ("matches", "startswith", "contains")
FACT_FUNCS = ("fact_count", "fact_sum", "fact_min", "fact_max", "fact_mean")
LITERALS = ("0", "1", "-1", "0.5", "1e308", "1e999", "1ms", "2.5us", "64KiB", "1GB", "50%", "0%", "100%",
            "True", "False", "None", "'text'", '"a|b"', "window_ns", "setup_ns", "10**3", "1/0", "2**64")
REGEXES = ('"(a+)+$"', '"["', '"(?=x)"', r'"(a)\1"', '"gemm|conv"', '"^"', '""', '"\\\\d+"', '"é.*"')
FILTER_NAMES = ("ms", "us", "s", "pct", "bytes", "num", "round", "duration", "int", "upper", "escape",
                "length", "default", "safe", "unknownfilter")
SCOPES = ("device", "kernel", "trace", "nvtx", "stream", "thread", "bogus", "")
SEVERITIES = ("info", "warning", "error", "critical", "", "WARNING")


@lru_cache(maxsize=1)
def default_rules() -> list[dict[str, Any]]:
    from analyzer.pipeline import default_rules_path

    return yaml.safe_load(default_rules_path().read_text(encoding="utf-8"))["rules"]


def fact_columns() -> dict[str, list[str]]:
    from analyzer.facts.registry import all_specs

    return {name: list(spec.columns) for name, spec in all_specs().items()}


# ----------------------------------------------------------------------------------------------------
# strategies
# ----------------------------------------------------------------------------------------------------
def yaml_values() -> Any:
    from hypothesis import strategies as st

    scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
                        st.sampled_from(["1ms", "50%", "64KiB", "abc", "", "-5", "1e999s", "nan", "inf"]))
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)


def expressions(names: list[str], depth: int = 4) -> Any:
    """Expressions of the rule language (and near misses), built from ``names``."""
    from hypothesis import strategies as st

    atom = st.one_of(st.sampled_from(names or ["x"]), st.sampled_from(LITERALS))
    if depth <= 0:
        return atom
    sub = expressions(names, depth - 1)
    return st.one_of(
        atom, atom,
        st.builds(lambda a, op, b: f"{a} {op} {b}", sub,
                  st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "<", "<=", ">", ">=", "==", "!=",
                                   "and", "or", "in", "is", "&", "|"]), sub),
        st.builds(lambda op, a: f"{op}{a}", st.sampled_from(["-", "not ", "+", "~"]), sub),
        st.builds(lambda a: f"({a})", sub),
        st.builds(lambda f, a: f"{f}({a})", st.sampled_from(AGGREGATES + ELEMENTWISE + ("len", "open")), sub),
        st.builds(lambda f: f"{f}()", st.sampled_from(AGGREGATES)),
        st.builds(lambda f, a, b: f"{f}({a}, {b})", st.sampled_from(("min", "max", "p", "clip", "sum")), sub, sub),
        st.builds(lambda a, lo, hi: f"clip({a}, {lo}, {hi})", sub, atom, atom),
        st.builds(lambda f, a, r: f"{f}({a}, {r})", st.sampled_from(TEXT_FUNCS), sub, st.sampled_from(REGEXES)),
        st.builds(lambda f, a, b: f'{f}("{a}", "{b}")', st.sampled_from(FACT_FUNCS),
                  st.sampled_from(["gpu_busy", "kernels", "gpu_gaps", "nope", "ncu_kernels"]),
                  st.sampled_from(names or ["x"])),
        st.builds(lambda a, c, b: f"{a} if {c} else {b}", sub, sub, sub),
        st.builds(lambda a: f"{a}.real", atom),
        st.builds(lambda a: f"{a}[0]", atom),
    )


def row_expressions(columns: list[str], params: list[str], depth: int = 3) -> Any:
    """Row-level expressions that are well formed: columns, parameters, literals, element-wise math,
    text tests with valid patterns, arithmetic and comparisons."""
    from hypothesis import strategies as st

    atom = st.one_of(st.sampled_from(columns or ["duration"]), st.sampled_from(params or ["1"]),
                     st.sampled_from(["0", "1", "2.5", "1ms", "10us", "64KiB", "50%", "1e18", "-3"]))
    if depth <= 0:
        return atom
    sub = row_expressions(columns, params, depth - 1)
    return st.one_of(
        atom,
        st.builds(lambda a, op, b: f"({a} {op} {b})", sub, st.sampled_from(["+", "-", "*", "/", "//", "%"]), sub),
        st.builds(lambda a, op, b: f"({a} {op} {b})", sub, st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), sub),
        st.builds(lambda a, op, b: f"({a} {op} {b})", sub, st.sampled_from(["and", "or"]), sub),
        st.builds(lambda a: f"not {a}", sub),
        st.builds(lambda f, a: f"{f}({a})", st.sampled_from(["abs", "sqrt", "log10"]), sub),
        st.builds(lambda f, a, b: f"{f}({a}, {b})", st.sampled_from(["min", "max"]), sub, sub),
        st.builds(lambda f, c, r: f"{f}({c}, {r})", st.sampled_from(TEXT_FUNCS), st.sampled_from(columns or ["name"]),
                  st.sampled_from(['"gemm|conv"', '"^void"', '"(a+)+$"', '"_"', '""', '"step"'])),
        st.builds(lambda a, c, b: f"({a} if {c} else {b})", sub, sub, sub),
    )


def group_expressions(columns: list[str], params: list[str], lets: list[str], depth: int = 2) -> Any:
    """Group-level expressions that are well formed: aggregates of row expressions, lets, parameters."""
    from hypothesis import strategies as st

    row = row_expressions(columns, params, 2)
    agg = st.one_of(
        st.just("count()"),
        st.builds(lambda f, a: f"{f}({a})", st.sampled_from(["sum", "mean", "median", "min", "max", "first",
                                                              "nunique", "any", "all", "share"]), row),
        st.builds(lambda a, q: f"p({a}, {q})", row, st.sampled_from(["0", "50", "95", "100"])),
    )
    atom = st.one_of(agg, st.sampled_from(lets or ["1"]), st.sampled_from(params or ["1"]),
                     st.sampled_from(["window_ns", "0", "1", "0.5", "1ms", "50%"]))
    if depth <= 0:
        return atom
    sub = group_expressions(columns, params, lets, depth - 1)
    return st.one_of(
        atom,
        st.builds(lambda a, op, b: f"({a} {op} {b})", sub, st.sampled_from(["+", "-", "*", "/", "<", ">=", "==",
                                                                             "and", "or"]), sub),
        st.builds(lambda f, a, b: f"{f}({a}, {b})", st.sampled_from(["min", "max"]), sub, sub),
        st.builds(lambda a, lo, hi: f"clip({a}, {lo}, {hi})", sub, atom, atom),
    )


def templates(names: list[str]) -> Any:
    from hypothesis import strategies as st

    name = st.one_of(st.sampled_from(names or ["x"]), st.sampled_from(["window_ns", "missing_name", "loop", "self"]))
    flt = st.builds(lambda f, d: f if d is None else f"{f}({d})", st.sampled_from(FILTER_NAMES),
                    st.one_of(st.none(), st.sampled_from(["0", "2", "-1", "'x'", "999"])))
    piece = st.one_of(
        st.builds(lambda n: "{{ " + n + " }}", name),
        st.text(max_size=20),
        st.builds(lambda n, f: "{{ " + n + " | " + f + " }}", name, flt),
        st.builds(lambda a, op, b, body: "{% if " + f"{a} {op} {b}" + " %}" + body + "{% endif %}",
                  name, st.sampled_from([">", "<", "==", "!=", ">=", "and", "or"]),
                  st.one_of(name, st.sampled_from(["0", "1.5", "'a'", "none"])), st.text(max_size=8)),
        st.sampled_from(["{{", "}}", "{%", "%}", "{# x #}", "{% endif %}", "{% if %}", "{{ 1 + 2 }}",
                         "{{ x.y }}", "{{ x['y'] }}", "{% for i in x %}{% endfor %}", "{{ range(3) }}",
                         "{% raw %}{{{% endraw %}", "{{ 10 ** 10 }}"]),
    )
    return st.lists(piece, min_size=1, max_size=6).map("".join)


def rule_mutation(rule: dict[str, Any], columns: list[str]) -> Any:
    """A strategy of functions that change one rule dict in place."""
    from hypothesis import strategies as st

    lets = list((rule.get("let") or {}).keys())
    params = list((rule.get("parameters") or {}).keys())
    names = columns + lets + params
    keys = list(rule.keys())

    def delete(key: str) -> Any:
        return lambda r: r.pop(key, None)

    def setter(key: str, value: Any) -> Any:
        return lambda r: r.__setitem__(key, value)

    def set_let(name: str, expr: str) -> Any:
        return lambda r: (r.setdefault("let", {}) if isinstance(r.get("let"), dict) else
                          r.__setitem__("let", {}) or r["let"]).__setitem__(name, expr)

    def set_param(name: str, field: str, value: Any) -> Any:
        def apply(r: dict[str, Any]) -> None:
            params = r.get("parameters")
            if not isinstance(params, dict):
                params = r["parameters"] = {}
            p = params.setdefault(name, {"default": 1, "unit": "number", "doc": "d"})
            if isinstance(p, dict):
                p[field] = value
        return apply

    def set_evidence(field: str, value: Any) -> Any:
        def apply(r: dict[str, Any]) -> None:
            ev = r.get("evidence")
            if not isinstance(ev, dict):
                ev = r["evidence"] = {}
            ev[field] = value
        return apply

    expr = expressions(names)
    good_where = row_expressions(columns, params)
    good_group = group_expressions(columns, params, lets)
    well_formed = [
        st.builds(setter, st.just("where"), good_where),
        st.builds(setter, st.sampled_from(["condition", "impact"]), good_group),
        st.builds(set_let, st.sampled_from(lets + ["new_let"]), good_group),
        st.builds(setter, st.just("message"), templates(lets + params or names)),
        st.builds(set_param, st.sampled_from(params or ["newp"]), st.just("default"),
                  st.sampled_from([0, 1, -1, 0.5, 10**12, "1ms", "0ns", "100%", "0%", "1KiB", "x"])),
    ]
    hostile = [
        st.builds(set_let, st.sampled_from(["count", "_private", "window_ns", "if"]), expr),
        st.builds(delete, st.sampled_from(keys)),
        st.builds(set_let, st.sampled_from(["count", "_private", "window_ns", "if"]), expr),
        st.builds(delete, st.sampled_from(keys)),
        st.builds(setter, st.sampled_from(["where", "condition", "impact"]), expr),
        st.builds(set_let, st.sampled_from(lets + ["new_let"]), expr),
        st.builds(setter, st.sampled_from(keys + ["extra_key"]), yaml_values()),
        st.builds(setter, st.sampled_from(["where", "condition", "impact"]), st.text(max_size=40)),
        st.builds(set_param, st.sampled_from(params + ["newp"]), st.sampled_from(["default", "unit", "min", "max", "doc"]),
                  st.one_of(yaml_values(), st.sampled_from(["duration", "percent", "bytes", "text", "count",
                                                            "1ms", "150%", "(a+)+", "["]))),
        st.builds(set_evidence, st.sampled_from(["columns", "sort", "limit", "extra"]),
                  st.one_of(yaml_values(), st.lists(st.sampled_from(columns + ["-duration", "nope"]), max_size=5),
                            st.sampled_from([0, -1, 10**12, "10", "-duration"]))),
        st.builds(setter, st.just("scope"), st.sampled_from(SCOPES)),
        st.builds(setter, st.just("severity"), st.sampled_from(SEVERITIES)),
        st.builds(setter, st.just("source"), st.sampled_from(["kernels", "gpu_gaps", "nope", "ncu_kernels", ""])),
        st.builds(setter, st.sampled_from(["explains", "explained_by"]),
                  st.lists(st.sampled_from(["gpu-idle-gaps", "nope", "GPU001", ""]), max_size=3)),
        st.builds(setter, st.sampled_from(["id", "name"]), st.sampled_from(["GPU001", "gpu-idle-gaps", "X", "", "a b"])),
    ]
    # three in four changes keep the rule well formed, so that most cases reach evaluation and the report
    return st.sampled_from(well_formed * 9 + hostile).flatmap(lambda strategy: strategy)


def text_damage() -> Any:
    from hypothesis import strategies as st

    return st.one_of(
        st.just(lambda t: t.replace("  ", "\t", 3)),
        st.just(lambda t: "base: &b {x: 1}\n" + t.replace("version: 1", "version: 1\nextra: *b", 1)),
        st.just(lambda t: t.replace("rules:", "rules: !!python/object/apply:os.getcwd []\nx:", 1)),
        st.just(lambda t: t + "\n" + "[" * 500 + "]" * 500 + "\n"),
        st.builds(lambda f: (lambda t: t[: int(len(t) * f)]), st.floats(0, 1)),
        st.just(lambda t: t.replace("version: 1", "version: 2", 1)),
        st.just(lambda t: t + "\n---\nversion: 1\nrules: []\n"),
        st.just(lambda t: t.replace("version: 1", "version: 1\nversion: 1", 1)),
        st.just(lambda t: "\ufeff" + t),
        st.just(lambda t: t + "# " + "x" * 300_000 + "\n"),
    )


# ----------------------------------------------------------------------------------------------------
# running
# ----------------------------------------------------------------------------------------------------
class Runner:
    """One real trace loaded and its facts cached; each case loads a rule file, evaluates it and renders
    the report."""

    def __init__(self, workdir: Path, trace_name: str = "dataloader_starved",
                 timeout: float = CASE_TIMEOUT_S) -> None:
        from analyzer.facts import FactStore
        from analyzer.facts.scalars import trace_scalars
        from analyzer.loading import load_trace
        from analyzer.testing import real_trace
        from analyzer.window import choose_window

        self.workdir = workdir
        self.timeout = timeout
        self.trace = load_trace(real_trace(trace_name))
        self.window = choose_window(self.trace, None)
        self.store = FactStore(self.trace, self.window, {"exclude_ranges": ("warmup*",), "only_ranges": None})
        self.scalars = trace_scalars(self.store)
        self.columns = fact_columns()

    def analyze(self, path: Path) -> Outcome:
        from analyzer.analysis import Analysis
        from analyzer.reports import build_report, render
        from analyzer.rules import evaluate, load_pack
        from analyzer.watchdog import Watchdog

        def run() -> None:
            with Watchdog(self.timeout, str(path)):
                pack = load_pack(path)
                findings = evaluate(pack, self.store, self.window, self.scalars)
                analysis = Analysis(trace=self.trace, window=self.window, findings=findings, facts=self.store,
                                    rules_file=str(path), parameters={})
                render(build_report([analysis]), "md")

        return run_guarded(run)

    def case(self, text: bytes, index: int = 0) -> Outcome:
        folder = self.workdir / f"rules{index % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "fuzzed-pack.yaml"
        path.write_bytes(text)
        before = sha256(path)
        listing = sorted(os.listdir(folder))
        outcome = self.analyze(path)
        check_outcome(outcome, names=[str(path)])
        if sha256(path) != before or sorted(os.listdir(folder)) != listing:
            raise FuzzFailure("the rule file or its folder changed")
        return outcome


def run_cases(n: int, seed: int, workdir: Path, *, stats: Any = None, derandomize: bool = False) -> Any:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    from analyzer.fuzz.harness import Stats

    stats = stats or Stats("rules", seed=seed)
    runner = Runner(workdir)
    rules = default_rules()
    # strategies built once per rule (building them per case cost more than running the case)
    changes = [st.lists(rule_mutation(r, runner.columns.get(str(r.get("source")), [])), min_size=1, max_size=2)
               for r in rules]

    @settings(max_examples=n, deadline=None, derandomize=derandomize, database=None, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data: Any) -> None:
        stats.stop_if_out_of_time()
        picked = data.draw(st.lists(st.sampled_from(range(len(rules))), min_size=1, max_size=3, unique=True),
                           label="rules")
        pack_rules = []
        kept = {str(rules[i].get(k)) for i in picked for k in ("id", "name")}
        for i in picked:
            rule = copy.deepcopy(rules[i])
            for key in ("explains", "explained_by"):  # links to rules left out of this pack
                if isinstance(rule.get(key), list):
                    rule[key] = [x for x in rule[key] if str(x) in kept]
                    if not rule[key]:
                        del rule[key]
            for change in data.draw(changes[i], label="changes"):
                change(rule)
            pack_rules.append(rule)
        text = yaml.safe_dump({"version": 1, "rules": pack_rules}, sort_keys=False, allow_unicode=True)
        if data.draw(st.sampled_from([False] * 5 + [True]), label="damage the text"):
            text = data.draw(text_damage(), label="text damage")(text)
        raw = text.encode("utf-8", "surrogatepass")
        if data.draw(st.sampled_from([False] * 30 + [True]), label="invalid utf-8"):
            raw = raw[: len(raw) // 2] + b"\xff\xfe" + raw[len(raw) // 2:]
        outcome = runner.case(raw, stats.cases)
        stats.record(outcome, names=[str(runner.workdir)])

    if not derandomize:
        one = hseed(seed)(one)
    one()
    return stats
