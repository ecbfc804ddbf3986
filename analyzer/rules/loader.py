"""Load and validate rule packs before any trace is read.

:func:`validate_pack` collects every problem (``analyze rules validate`` prints them all);
:func:`load_pack` raises the first. Each problem is a :class:`RuleError` naming file, line, rule and
what to do, e.g. ``default.yaml:14: unknown column "durration" in GPU001.condition; did you mean
"duration"?``.
"""
from __future__ import annotations

import keyword
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from analyzer.errors import ParameterError, RuleError, UnsafeRuleError
from analyzer.facts.registry import FactSpec, all_specs
from analyzer.findings import Severity
from analyzer.rules.expr import (
    AGGREGATES,
    FACT_FUNCTIONS,
    TEXT_FUNCTIONS,
    Expr,
    ExprError,
    Names,
    check_pattern,
    compile_expr,
    did_you_mean,
)
from analyzer.rules.model import (
    BUILTINS,
    CATEGORIES,
    SCOPES,
    Evidence,
    Parameter,
    Rule,
    RulePack,
    RuleTest,
    known_scalars,
)
from analyzer.rules.templates import compile_template
from analyzer.rules.units import UNITS, UnitError, parse_quantity
from analyzer.rules.yamlsafe import LineDict, LineList, load_yaml

VERSION = 1
DEFAULT_PACK = Path(__file__).parent / "packs" / "default.yaml"
REQUIRED = ("id", "name", "title", "severity", "source", "condition", "message", "what", "why", "fix")
OPTIONAL = ("category", "scope", "group_by", "parameters", "where", "let", "impact", "evidence",
            "references", "explains", "tests", "calibration")
TOP_KEYS = ("version", "rules")
PARAM_KEYS = ("default", "unit", "doc", "min", "max")
EVIDENCE_KEYS = ("columns", "sort", "limit")
TEST_KEYS = ("trace", "expect", "set", "window", "note", "ncu")
MAX_EVIDENCE_LIMIT = 1000
ID_RE = re.compile(r"^[A-Z]{2,5}\d{3}$")
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
IDENT_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_FUNCTION_NAMES = {*AGGREGATES, "abs", "sqrt", "log10", "clip", *TEXT_FUNCTIONS, *FACT_FUNCTIONS}


def load_pack(
    path: str | Path,
    *,
    facts: Mapping[str, FactSpec] | None = None,
    scalars: Iterable[str] | None = None,
) -> RulePack:
    """Load a pack (a YAML file, or a folder of them); raise the first problem found.

    ``facts`` defaults to the registered facts, ``scalars`` to :func:`known_scalars`."""
    pack, problems = validate_pack(path, facts=facts, scalars=scalars)
    if problems:
        first = problems[0]
        if len(problems) > 1:
            more = f"{len(problems) - 1} more problem(s): run `analyze rules validate {path}`"
            first.args = (f"{first.args[0]} ({more})",)
        raise first
    assert pack is not None
    return pack


def validate_pack(
    path: str | Path,
    *,
    facts: Mapping[str, FactSpec] | None = None,
    scalars: Iterable[str] | None = None,
) -> tuple[RulePack | None, list[RuleError]]:
    """(pack or None, every problem found). Unsafe content stops at the first problem."""
    path = Path(path)
    files = sorted([*path.glob("*.yaml"), *path.glob("*.yml")]) if path.is_dir() else [path]
    if not files:
        return None, [RuleError("no *.yaml rule files in this folder", file=str(path))]
    loader = _Loader(all_specs() if facts is None else dict(facts),
                     frozenset(known_scalars() if scalars is None else scalars))
    rules: list[Rule] = []
    for file in files:
        try:
            rules += loader.load_file(file)
        except UnsafeRuleError as err:
            return None, [err]
    loader.check_pack(rules)
    if any(isinstance(p, UnsafeRuleError) for p in loader.problems):
        return None, [next(p for p in loader.problems if isinstance(p, UnsafeRuleError))]
    pack = RulePack(rules=tuple(rules), path=str(path), version=VERSION)
    if not loader.problems:
        loader.check_test_overrides(pack)
    return (pack if not loader.problems else None), loader.problems


class _Loader:
    def __init__(self, facts: dict[str, FactSpec], scalars: frozenset[str]) -> None:
        self.facts = facts
        self.scalars = scalars
        self.problems: list[RuleError] = []

    # -- helpers -------------------------------------------------------------------------------
    def problem(self, message: str, file: str, line: int | None, rule_id: str | None = None,
                hint: str | None = None, *, unsafe: bool = False) -> None:
        cls = UnsafeRuleError if unsafe else RuleError
        err = cls(message, file=file, line=line, hint=hint)
        err.rule_id = rule_id
        self.problems.append(err)

    def unknown_keys(self, data: LineDict, known: Iterable[str], where: str, file: str,
                     rule_id: str | None) -> None:
        known = tuple(known)
        for key in data:
            if key not in known:
                hint = did_you_mean(str(key), known) or f"known keys: {', '.join(known)}"
                self.problem(f'unknown key "{key}" in {where}', file, data.line_of(key), rule_id, hint)

    def text(self, data: LineDict, key: str, where: str, file: str, rule_id: str | None,
             required: bool = True) -> str:
        value = data.get(key)
        if value is None:
            if required:
                self.problem(f'missing required field "{key}" in {where}', file, data.line, rule_id)
            return ""
        if not isinstance(value, str) or not value.strip():
            self.problem(f'"{key}" in {where} must be non-empty text', file, data.line_of(key), rule_id)
            return ""
        return value.strip()

    # -- files ---------------------------------------------------------------------------------
    def load_file(self, path: Path) -> list[Rule]:
        file = str(path)
        try:
            doc = load_yaml(path)
        except UnsafeRuleError:
            raise
        except RuleError as err:
            self.problems.append(err)
            return []
        if not isinstance(doc, LineDict):
            self.problem("a rule file is a mapping with `version: 1` and `rules:`", file, 1)
            return []
        self.unknown_keys(doc, TOP_KEYS, "the rule file", file, None)
        version = doc.get("version")
        if version is None:
            self.problem("missing `version: 1` at the top of the rule file", file, doc.line)
        elif version != VERSION or isinstance(version, bool):
            self.problem(f"unsupported rule file version {version!r}; this analyzer reads version {VERSION}",
                         file, doc.line_of("version"), hint=f"write `version: {VERSION}`")
            return []
        rules = doc.get("rules")
        if not isinstance(rules, LineList) or not rules:
            self.problem("`rules:` must be a non-empty list of rules", file, doc.line_of("rules"))
            return []
        out = []
        for index, data in enumerate(rules):
            if not isinstance(data, LineDict):
                self.problem(f"rules[{index}] must be a mapping", file, rules.line_of(index))
                continue
            rule = self.load_rule(data, file, index)
            if rule is not None:
                out.append(rule)
        return out

    # -- one rule ------------------------------------------------------------------------------
    def load_rule(self, data: LineDict, file: str, index: int) -> Rule | None:
        before = len(self.problems)
        rid = data.get("id") if isinstance(data.get("id"), str) else None
        where = rid or f"rules[{index}]"
        self.unknown_keys(data, REQUIRED + OPTIONAL, where, file, rid)
        fields = {k: self.text(data, k, where, file, rid) for k in REQUIRED if k not in ("condition",)}
        if "condition" not in data:
            self.problem(f'missing required field "condition" in {where}', file, data.line, rid)
        if fields["id"] and not ID_RE.match(fields["id"]):
            self.problem(f'rule id "{fields["id"]}" must be 2-5 capital letters and 3 digits, e.g. GPU001',
                         file, data.line_of("id"), rid)
        if fields["name"] and not NAME_RE.match(fields["name"]):
            self.problem(f'rule name "{fields["name"]}" must be kebab-case, e.g. gpu-idle-gaps', file,
                         data.line_of("name"), rid)
        severity = Severity.WARNING
        if fields["severity"]:
            try:
                severity = Severity.parse(fields["severity"])
            except ValueError as err:
                self.problem(str(err), file, data.line_of("severity"), rid)
        category = self.text(data, "category", where, file, rid, required=False) or "general"
        if category not in CATEGORIES:
            self.problem(f'unknown category "{category}" in {where}', file, data.line_of("category"), rid,
                         did_you_mean(category, CATEGORIES) or f"categories: {', '.join(CATEGORIES)}")
        scope = self.text(data, "scope", where, file, rid, required=False) or "trace"
        if scope not in SCOPES:
            self.problem(f'unknown scope "{scope}" in {where}', file, data.line_of("scope"), rid,
                         did_you_mean(scope, SCOPES) or f"scopes: {', '.join(SCOPES)}")
            return None  # the names a rule may read depend on its scope
        source = fields["source"]
        spec = self.facts.get(source) if source else None
        if source and spec is None:
            self.problem(f'unknown fact "{source}" in {where}.source', file, data.line_of("source"), rid,
                         did_you_mean(source, self.facts) or f"facts: {', '.join(sorted(self.facts)) or 'none'}")
        if spec is None:
            return None  # names cannot be checked without a valid source
        columns = frozenset(spec.columns)

        key_columns = self.group_by(data, scope, columns, file, rid)
        params = self.parameters(data, columns, file, rid)
        consts = frozenset(p.name for p in params) | frozenset(BUILTINS) | self.scalars
        text_params = frozenset(p.name for p in params if p.unit == "text")
        fact_columns = {name: frozenset(s.columns) for name, s in self.facts.items()}
        keys = frozenset(SCOPES[scope])

        def compile_field(value: Any, level: str, field: str, lets: frozenset[str], line: int) -> Expr | None:
            names = Names(columns=columns, consts=consts, text_params=text_params, lets=lets, keys=keys,
                          facts=fact_columns)
            try:
                return compile_expr(value, level, names)
            except ExprError as err:
                self.problem(f"{err.message} in {rid}.{field}", file, line, rid, err.hint, unsafe=err.unsafe)
                return None

        where_expr = None
        if "where" in data:
            where_expr = compile_field(data["where"], "row", "where", frozenset(), data.line_of("where"))
        lets: list[tuple[str, Expr]] = []
        raw_lets = data.get("let", LineDict())
        if not isinstance(raw_lets, LineDict):
            self.problem(f"{rid}.let must be a mapping of name: expression", file, data.line_of("let"), rid)
            raw_lets = LineDict()
        taken = columns | consts | keys  # function names are fine: calls and names never mix
        failed: set[str] = set()  # lets with an error: known to later fields (no cascade of errors)
        for name, value in raw_lets.items():
            line = raw_lets.line_of(name)
            if not self.identifier(name, f"{rid}.let", taken, file, line, rid):
                continue
            expr = compile_field(value, "group", f"let.{name}", frozenset(n for n, _ in lets) | failed, line)
            if expr is not None:
                lets.append((name, expr))
            else:
                failed.add(name)
        let_names = frozenset(n for n, _ in lets) | failed
        condition = None
        if "condition" in data:
            condition = compile_field(data["condition"], "group", "condition", let_names,
                                      data.line_of("condition"))
        impact = None
        if data.get("impact") is not None:
            impact = compile_field(data["impact"], "group", "impact", let_names, data.line_of("impact"))

        template = None
        if fields["message"]:
            try:
                template = compile_template(fields["message"], consts | let_names | keys)
            except ExprError as err:
                self.problem(f"{err.message} in {rid}.message", file, data.line_of("message"), rid, err.hint,
                             unsafe=err.unsafe)
        evidence = self.evidence(data, columns, file, rid)
        references = self.string_list(data, "references", file, rid)
        for ref in references:
            if not ref.startswith(("https://", "http://")):
                self.problem(f'reference "{ref}" in {rid} must be an http(s) URL', file,
                             data.line_of("references"), rid)
        explains = self.string_list(data, "explains", file, rid)
        calibration = self.text(data, "calibration", where, file, rid, required=False) or ""
        tests = self.tests(data, file, rid)
        regex_params = {p for _, e in [("", where_expr), *lets, ("", condition), ("", impact)] if e
                        for p in e.regex_params}
        params = [self.check_regex_param(p, file, data, rid) if p.name in regex_params else p for p in params]
        if len(self.problems) > before or condition is None:
            return None
        read = {n for e in (where_expr, condition, impact, *(e for _, e in lets)) if e for n in e.names}
        read |= {*key_columns, *evidence.columns, *(c for c, _ in evidence.sort)}
        return Rule(
            id=fields["id"], name=fields["name"], title=fields["title"], category=category,
            severity=severity, scope=scope, source=source, key_columns=key_columns,
            parameters=tuple(params), where=where_expr, lets=tuple(lets), condition=condition,
            impact=impact, evidence=evidence, message=fields["message"], what=fields["what"],
            why=fields["why"], fix=fields["fix"], calibration=calibration, references=tuple(references),
            explains=tuple(explains), tests=tuple(tests), file=file, line=data.line,
            columns=tuple(sorted(read & columns)), template=template,
        )

    def identifier(self, name: Any, where: str, taken: frozenset[str], file: str, line: int,
                   rid: str | None) -> bool:
        if not isinstance(name, str) or not IDENT_RE.match(name) or keyword.iskeyword(name):
            self.problem(f'"{name}" in {where} must be a lower_case name', file, line, rid,
                         unsafe=isinstance(name, str) and name.startswith("_"))
            return False
        if name in taken:
            self.problem(f'"{name}" in {where} shadows a column, built-in or function of the same name',
                         file, line, rid, "choose another name")
            return False
        return True

    def group_by(self, data: LineDict, scope: str, columns: frozenset[str], file: str,
                 rid: str | None) -> tuple[str, ...]:
        canonical = SCOPES[scope]
        raw = data.get("group_by", list(canonical))
        if isinstance(raw, str):
            raw = [raw]
        line = data.line_of("group_by")
        if not isinstance(raw, list) or not all(isinstance(c, str) for c in raw) or len(raw) != len(canonical):
            self.problem(f"{rid}.group_by must list {len(canonical)} column(s) standing for "
                         f"{', '.join(canonical) or 'nothing (scope trace)'}", file, line, rid)
            return canonical
        for column in raw:
            if column not in columns:
                self.problem(f'scope {scope} of {rid} groups by column "{column}", which fact '
                             f'"{data.get("source")}" does not have', file, line, rid,
                             did_you_mean(column, columns) or "set group_by: to the fact's column")
        return tuple(raw)

    def parameters(self, data: LineDict, columns: frozenset[str], file: str, rid: str | None) -> list[Parameter]:
        raw = data.get("parameters", LineDict())
        if not isinstance(raw, LineDict):
            self.problem(f"{rid}.parameters must be a mapping", file, data.line_of("parameters"), rid)
            return []
        taken = columns | frozenset(BUILTINS) | self.scalars | frozenset(k for ks in SCOPES.values() for k in ks)
        out = []
        for name, spec in raw.items():
            line = raw.line_of(name)
            where = f"{rid}.parameters.{name}"
            if not self.identifier(name, f"{rid}.parameters", taken, file, line, rid):
                continue
            if not isinstance(spec, LineDict):
                self.problem(f"{where} must be a mapping with default, unit and doc", file, line, rid)
                continue
            self.unknown_keys(spec, PARAM_KEYS, where, file, rid)
            unit = spec.get("unit")
            if unit not in UNITS:
                self.problem(f'unknown unit "{unit}" in {where}', file, spec.line_of("unit"), rid,
                             did_you_mean(str(unit), UNITS) or f"units: {', '.join(UNITS)}")
                continue
            doc = self.text(spec, "doc", where, file, rid)
            if "default" not in spec:
                self.problem(f"missing default in {where}", file, spec.line, rid)
                continue
            try:
                default = parse_quantity(spec["default"], unit)
                bounds = [parse_quantity(spec[k], unit) if k in spec else None for k in ("min", "max")]
            except UnitError as err:
                self.problem(f"{err} in {where}", file, spec.line_of("default"), rid)
                continue
            param = Parameter(name=name, unit=unit, default=default, value=default, doc=doc,
                              text=str(spec["default"]), default_text=str(spec["default"]),
                              minimum=bounds[0], maximum=bounds[1])
            problem = check_bounds(param, default)
            if problem:
                self.problem(f"default {problem} in {where}", file, spec.line_of("default"), rid)
            out.append(param)
        return out

    def check_regex_param(self, param: Parameter, file: str, data: LineDict, rid: str | None) -> Parameter:
        try:
            check_pattern(param.value)
        except ExprError as err:
            self.problem(f"{err.message} in {rid}.parameters.{param.name}", file, data.line_of("parameters"),
                         rid, err.hint, unsafe=err.unsafe)
        return Parameter(**{**vars(param), "regex": True})

    def evidence(self, data: LineDict, columns: frozenset[str], file: str, rid: str | None) -> Evidence:
        raw = data.get("evidence")
        if raw is None:
            return Evidence()
        if not isinstance(raw, LineDict):
            self.problem(f"{rid}.evidence must be a mapping (columns, sort, limit)", file,
                         data.line_of("evidence"), rid)
            return Evidence()
        self.unknown_keys(raw, EVIDENCE_KEYS, f"{rid}.evidence", file, rid)
        cols = self.string_list(raw, "columns", file, rid)
        sort_raw = raw.get("sort", [])
        sort_list = [sort_raw] if isinstance(sort_raw, str) else sort_raw
        sort: list[tuple[str, bool]] = []
        if not isinstance(sort_list, list) or not all(isinstance(s, str) for s in sort_list):
            self.problem(f"{rid}.evidence.sort must be a column or list of columns (-col: descending)",
                         file, raw.line_of("sort"), rid)
            sort_list = []
        for item in sort_list:
            sort.append((item.lstrip("-"), not item.startswith("-")))
        for key, names in (("columns", cols), ("sort", [c for c, _ in sort])):
            for column in names:
                if column not in columns:
                    self.problem(f'unknown column "{column}" in {rid}.evidence.{key}', file, raw.line_of(key),
                                 rid, did_you_mean(column, columns))
        limit = raw.get("limit", 10)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= MAX_EVIDENCE_LIMIT:
            self.problem(f"{rid}.evidence.limit must be a whole number 0..{MAX_EVIDENCE_LIMIT}", file,
                         raw.line_of("limit"), rid)
            limit = 10
        return Evidence(columns=tuple(cols), sort=tuple(sort), limit=limit)

    def string_list(self, data: LineDict, key: str, file: str, rid: str | None) -> list[str]:
        raw = data.get(key, [])
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
            self.problem(f"{rid}.{key} must be a list of text", file, data.line_of(key), rid)
            return []
        return list(raw)

    def tests(self, data: LineDict, file: str, rid: str | None) -> list[RuleTest]:
        raw = data.get("tests", LineList())
        if not isinstance(raw, LineList):
            self.problem(f"{rid}.tests must be a list of {{trace: ..., expect: fire|silent}}", file,
                         data.line_of("tests"), rid)
            return []
        out = []
        for index, case in enumerate(raw):
            line = raw.line_of(index)
            if not isinstance(case, LineDict):
                self.problem(f"{rid}.tests[{index}] must be a mapping", file, line, rid)
                continue
            self.unknown_keys(case, TEST_KEYS, f"{rid}.tests[{index}]", file, rid)
            trace, expect = case.get("trace"), case.get("expect")
            if not isinstance(trace, str) or not trace:
                self.problem(f"{rid}.tests[{index}] needs trace: PATH", file, line, rid)
                continue
            if expect not in ("fire", "silent"):
                self.problem(f"{rid}.tests[{index}].expect must be fire or silent, not {expect!r}", file,
                             case.line_of("expect"), rid)
                continue
            sets = case.get("set", [])
            sets = [sets] if isinstance(sets, str) else sets
            window = case.get("window")
            if not isinstance(sets, list) or not all(isinstance(s, str) for s in sets) or (
                window is not None and not isinstance(window, str)
            ):
                self.problem(f"{rid}.tests[{index}]: set must be a list of RULE.PARAM=VALUE, window text",
                             file, line, rid)
                continue
            ncu = case.get("ncu", [])
            ncu = [ncu] if isinstance(ncu, str) else ncu
            if not isinstance(ncu, list) or not all(isinstance(n, str) and n for n in ncu):
                self.problem(f"{rid}.tests[{index}]: ncu must be a path or a list of paths to Nsight Compute "
                             "exports", file, case.line_of("ncu"), rid)
                continue
            out.append(RuleTest(trace=trace, expect=expect, sets=tuple(sets), window=window,
                                note=str(case.get("note", "")), line=line, ncu=tuple(ncu)))
        return out

    # -- whole pack ----------------------------------------------------------------------------
    def check_pack(self, rules: list[Rule]) -> None:
        seen_ids: dict[str, Rule] = {}
        seen_names: dict[str, Rule] = {}
        for rule in rules:
            for key, seen in ((rule.id, seen_ids), (rule.name, seen_names)):
                if key in seen:
                    first = seen[key]
                    self.problem(f'duplicate rule {"id" if seen is seen_ids else "name"} "{key}" '
                                 f"(first defined at {first.file}:{first.line})", rule.file, rule.line, rule.id,
                                 "ids and names identify a rule in reports and --set; make them unique")
                seen[key] = rule
        names = {r.name for r in rules} | {r.id for r in rules}
        for rule in rules:
            for target in rule.explains:
                if target not in names:
                    self.problem(f'{rule.id}.explains names unknown rule "{target}"', rule.file, rule.line,
                                 rule.id, did_you_mean(target, names))

    def check_test_overrides(self, pack: RulePack) -> None:
        from analyzer.rules.overrides import apply_overrides

        for rule in pack.rules:
            for case in rule.tests:
                if case.sets:
                    try:
                        apply_overrides(pack, case.sets)
                    except ParameterError as err:
                        self.problem(f"{rule.id}.tests: {err}", rule.file, case.line, rule.id)


def check_bounds(param: Parameter, value: Any) -> str | None:
    """A message if ``value`` is outside the parameter's min/max, else None."""
    from analyzer.rules.units import format_quantity

    if param.minimum is not None and value < param.minimum:
        return f"{format_quantity(value, param.unit)} is below the minimum {format_quantity(param.minimum, param.unit)}"
    if param.maximum is not None and value > param.maximum:
        return f"{format_quantity(value, param.unit)} is above the maximum {format_quantity(param.maximum, param.unit)}"
    return None
