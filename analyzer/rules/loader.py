"""Load and validate rule packs before any trace is read.

:func:`validate_pack` collects every problem (``analyze rules validate`` prints them all);
:func:`load_pack` raises the first. Each problem is a :class:`RuleError` naming file, line, rule and
what to do, e.g. ``default.yaml:14: unknown column "durration" in GPU001.condition; did you mean
"duration"?``.
"""
from __future__ import annotations

import keyword
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from analyzer._paths import shown_path
from analyzer.errors import ParameterError, RuleError, UnsafeRuleError
from analyzer.facts.registry import FactSpec, all_specs
from analyzer.findings import FINDING_KINDS, Severity
from analyzer.rules.expr import (
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
from analyzer.rules.overrides import apply_overrides, check_bounds, set_parameter
from analyzer.rules.selection import SelectorError, resolve
from analyzer.rules.footprint import FOOTPRINTS, footprint_reads
from analyzer.rules.templates import compile_template
from analyzer.rules.units import UNITS, UnitError, parse_quantity
from analyzer.yamlsafe import LineDict, LineList, load_yaml

VERSION = 1
DEFAULT_PACK = Path(__file__).parent / "packs" / "default.yaml"
REQUIRED = ("id", "name", "title", "severity", "source", "condition", "message", "what", "why", "fix")
OPTIONAL = ("category", "scope", "group_by", "parameters", "where", "let", "impact", "evidence",
            "references", "explains", "tests", "calibration", "needs", "kind", "verdict", "footprint")
TOP_KEYS = ("version", "extends", "rules", "disable", "enable", "override")
OVERRIDE_KEYS = ("severity", "parameters")
PARAM_KEYS = ("default", "unit", "doc", "min", "max")
EVIDENCE_KEYS = ("columns", "sort", "limit")
TEST_KEYS = ("trace", "expect", "set", "window", "note", "ncu")
MAX_EVIDENCE_LIMIT = 1000
ID_RE = re.compile(r"^[A-Z]{2,5}\d{3}$")
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
IDENT_RE = re.compile(r"^[a-z][a-z0-9_]*$")


#: the name ``--rules`` and ``extends:`` give the built-in pack
BUILTIN_PACKS: dict[str, Path] = {"default": DEFAULT_PACK}


def load_pack(
    path: str | Path | Sequence[str | Path],
    *,
    facts: Mapping[str, FactSpec] | None = None,
    scalars: Iterable[str] | None = None,
) -> RulePack:
    """Load a pack (a YAML file, a folder of them, ``default``, or several of these composed in order);
    raise the first problem found.

    ``facts`` defaults to the registered facts, ``scalars`` to :func:`known_scalars`."""
    pack, problems = validate_pack(path, facts=facts, scalars=scalars)
    if problems:
        first = problems[0]
        if len(problems) > 1:
            named = " ".join(str(p) for p in _refs(path))
            more = f"{len(problems) - 1} more problem(s): run `analyze rules validate {named}`"
            first.args = (f"{first.args[0]} ({more})",)
        raise first
    assert pack is not None
    return pack


def _refs(path: str | Path | Sequence[str | Path]) -> list[str | Path]:
    return [path] if isinstance(path, (str, Path)) else list(path)


def resolve_pack_ref(ref: str | Path, base: Path | None = None) -> Path:
    """``default`` -> the built-in pack; a relative path -> under ``base`` (else the working directory)."""
    text = str(ref)
    if text in BUILTIN_PACKS:
        return BUILTIN_PACKS[text]
    if "\0" in text:
        shown = text.replace("\0", "\\0")
        raise UnsafeRuleError(f'the rule pack path "{shown}" holds a NUL byte', hint="name a rule file or folder")
    path = Path(text).expanduser()
    return path if path.is_absolute() or base is None else base / path


def validate_pack(
    path: str | Path | Sequence[str | Path],
    *,
    facts: Mapping[str, FactSpec] | None = None,
    scalars: Iterable[str] | None = None,
) -> tuple[RulePack | None, list[RuleError]]:
    """(pack or None, every problem found). Unsafe content stops at the first problem.

    ``path`` is one pack reference or several, composed in order: each is ``default`` (the built-in
    pack), a YAML file or a folder of them. A file may ``extends:`` other packs, add ``rules:``,
    ``disable:`` / ``enable:`` rules and ``override:`` their parameters and severity (see
    docs/writing-rules.md, "Composing packs"); a file reached twice is read once."""
    refs = _refs(path)
    if not refs:
        return None, [RuleError("no rule pack given")]
    loader = _Loader(all_specs() if facts is None else dict(facts),
                     frozenset(known_scalars() if scalars is None else scalars))
    composer = _Composer(loader)
    try:
        for ref in refs:
            composer.include(resolve_pack_ref(ref), chain=())
    except UnsafeRuleError as err:
        return None, [err]
    rules = composer.rules
    loader.check_pack(rules)
    if any(isinstance(p, UnsafeRuleError) for p in loader.problems):
        return None, [next(p for p in loader.problems if isinstance(p, UnsafeRuleError))]
    label = ", ".join(str(r) for r in refs)
    pack = RulePack(rules=tuple(rules), path=label, version=VERSION, files=tuple(composer.files))
    if composer.disabled:
        pack = pack.with_enabled({r.id for r in rules} - set(composer.disabled), composer.disabled)
    if not loader.problems:
        loader.check_test_overrides(pack)
    return (pack if not loader.problems else None), loader.problems


class _Composer:
    """Reads pack files in order, following ``extends:`` depth first, each file once."""

    def __init__(self, loader: _Loader) -> None:
        self.loader = loader
        self.rules: list[Rule] = []
        self.disabled: dict[str, str] = {}  # rule id -> reason
        self.files: list[str] = []
        self.seen: set[Path] = set()
        self.broken: set[str] = set()  # names/ids of rules that failed to load: no follow-up errors

    def include(self, path: Path, chain: tuple[Path, ...], line_from: tuple[str, int] | None = None) -> None:
        if path.is_dir():
            files = sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
            if not files:
                self.loader.problems.append(RuleError("no *.yaml rule files in this folder", file=str(path)))
            for member in files:
                self.include(member, chain, line_from)
            return
        key = path.resolve()
        if key in chain:
            cycle = " -> ".join(str(p) for p in (*chain[chain.index(key):], key))
            where_file: str | None
            where_line: int | None
            where_file, where_line = line_from or (str(path), None)
            self.loader.problems.append(RuleError(f"packs extend each other in a cycle: {cycle}",
                                                  file=where_file, line=where_line,
                                                  hint="remove one of the extends:"))
            return
        if key in self.seen:
            return
        if not path.exists():
            where_file, where_line = line_from or (None, None)  # type: ignore[assignment]
            what = f'rule pack "{path}" does not exist'
            how = ("paths in extends: are relative to the file that names them" if line_from
                   else "check the path")
            self.loader.problems.append(RuleError(
                what, file=where_file, line=where_line,
                hint=f"{how}; built-in packs: {', '.join(BUILTIN_PACKS)}"))
            return
        self.seen.add(key)
        file = str(path)
        doc = self.loader.read(path)
        if doc is None:
            return
        extends = self.loader.string_list(doc, "extends", file, None) if "extends" in doc else []
        for ref in extends:
            if "\0" in ref:
                self.loader.problems.append(RuleError("a path in extends: holds a NUL byte", file=file,
                                                      line=doc.line_of("extends"), hint="name a rule file or folder"))
                continue
            self.include(resolve_pack_ref(ref, path.parent), (*chain, key), (file, doc.line_of("extends")))
        self.files.append(file)
        own = self.loader.rules_of(doc, file, required=not extends and not self._edits(doc))
        raw_rules = doc.get("rules")
        self.broken |= {str(v) for data in (raw_rules if isinstance(raw_rules, list) else [])
                        if isinstance(data, LineDict)
                        for v in (data.get("name"), data.get("id")) if isinstance(v, str)}
        self.broken -= {k for r in own for k in (r.name, r.id)}
        self.rules += own
        for key_name, switch_on in (("disable", False), ("enable", True)):
            if key_name in doc:
                self.switch(doc, key_name, switch_on, file)
        if "override" in doc:
            self.override(doc, file)

    @staticmethod
    def _edits(doc: LineDict) -> bool:
        return any(k in doc for k in ("disable", "enable", "override"))

    def switch(self, doc: LineDict, key: str, on: bool, file: str) -> None:
        line = doc.line_of(key)
        selectors = self.loader.string_list(doc, key, file, None)
        for selector in selectors:
            if selector in self.broken:
                continue
            try:
                ids = resolve((selector,), self.rules, f"{key}")
            except SelectorError as err:
                self.loader.problems.append(RuleError(err.message, file=file, line=line, hint=err.hint))
                continue
            for rid in ids:
                if on:
                    self.disabled.pop(rid, None)
                else:
                    self.disabled[rid] = f"disable {selector} ({shown_path(file)}:{line})"

    def override(self, doc: LineDict, file: str) -> None:
        raw = doc["override"]
        if not isinstance(raw, LineDict):
            self.loader.problem("override: must map rule names to {severity, parameters}", file,
                                doc.line_of("override"))
            return
        for ref, spec in raw.items():
            line = raw.line_of(ref)
            if str(ref) in self.broken:
                continue
            index = next((i for i, r in enumerate(self.rules)
                          if str(ref) in (r.name, r.id) or str(ref).upper() == r.id), None)
            if index is None:
                known = [r.name for r in self.rules] + [r.id for r in self.rules]
                self.loader.problem(f'override names unknown rule "{ref}"', file, line,
                                    hint=did_you_mean(str(ref), known) or "override a rule of an extended pack "
                                    "or of this file")
                continue
            if not isinstance(spec, LineDict):
                self.loader.problem(f"override.{ref} must be a mapping with severity and/or parameters",
                                    file, line)
                continue
            rule = self.rules[index]
            self.loader.unknown_keys(spec, OVERRIDE_KEYS, f"override.{ref}", file, rule.id)
            if "severity" in spec:
                try:
                    rule = replace(rule, severity=Severity.parse(str(spec["severity"])))
                except ValueError as err:
                    self.loader.problem(str(err), file, spec.line_of("severity"), rule.id)
            params = spec.get("parameters")
            if params is not None and not isinstance(params, LineDict):
                self.loader.problem(f"override.{ref}.parameters must map parameter names to values", file,
                                    spec.line_of("parameters"), rule.id)
            elif params is not None:
                for name, value in params.items():
                    pline = params.line_of(name)
                    try:
                        rule = rule.with_parameter(set_parameter(rule, str(name), value))
                    except ParameterError as err:
                        self.loader.problem(f"override.{ref}.parameters.{name}: {err.message}", file, pline,
                                            rule.id, err.hint)
            self.rules[index] = rule


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

    def unknown(self, what: str, value: Any, choices: Iterable[str], where: str, file: str, line: int | None,
                rule_id: str | None, listed: str) -> None:
        """``unknown <what> "<value>" in <where>``, hinting the nearest choice, else all of them."""
        choices = tuple(choices)
        self.problem(f'unknown {what} "{value}" in {where}', file, line, rule_id,
                     did_you_mean(str(value), choices) or f"{listed}: {', '.join(choices) or 'none'}")

    def choice(self, data: LineDict, key: str, where: str, file: str, rule_id: str | None,
               choices: Iterable[str], default: str, listed: str) -> tuple[str, bool]:
        """An optional text field that takes one of ``choices`` (``default`` when absent), and whether
        it does (an unknown value is a problem)."""
        value = self.text(data, key, where, file, rule_id, required=False) or default
        known = value in choices
        if not known:
            self.unknown(key, value, choices, where, file, data.line_of(key), rule_id, listed)
        return value, known

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
    def read(self, path: Path) -> LineDict | None:
        """The file's top-level mapping with its keys and version checked (None after a problem)."""
        file = str(path)
        try:
            doc = load_yaml(path)
        except UnsafeRuleError:
            raise
        except RuleError as err:
            self.problems.append(err)
            return None
        if not isinstance(doc, LineDict):
            self.problem("a rule file is a mapping with `version: 1` and `rules:` (or `extends:`)", file, 1)
            return None
        self.unknown_keys(doc, TOP_KEYS, "the rule file", file, None)
        version = doc.get("version")
        if version is None:
            self.problem("missing `version: 1` at the top of the rule file", file, doc.line)
        elif version != VERSION or isinstance(version, bool):
            self.problem(f"unsupported rule file version {version!r}; this analyzer reads version {VERSION}",
                         file, doc.line_of("version"), hint=f"write `version: {VERSION}`")
            return None
        return doc

    def rules_of(self, doc: LineDict, file: str, *, required: bool = True) -> list[Rule]:
        """The rules defined in ``doc`` (``rules:`` may be absent or empty when ``required`` is False:
        a file that only extends and adjusts other packs)."""
        rules = doc.get("rules")
        if rules is None and not required:
            return []
        if not isinstance(rules, LineList) or (required and not rules):
            self.problem("`rules:` must be a non-empty list of rules (or the file `extends:` another pack)",
                         file, doc.line_of("rules"))
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
        category, _ = self.choice(data, "category", where, file, rid, CATEGORIES, "general", "categories")
        scope, known = self.choice(data, "scope", where, file, rid, SCOPES, "trace", "scopes")
        if not known:
            return None  # the names a rule may read depend on its scope
        source = fields["source"]
        spec = self.facts.get(source) if source else None
        if source and spec is None:
            self.unknown("fact", source, sorted(self.facts), f"{where}.source", file, data.line_of("source"), rid,
                         "facts")
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
        kind, _ = self.choice(data, "kind", where, file, rid, FINDING_KINDS, "cause", "kinds")
        how, _ = self.choice(data, "footprint", where, file, rid, FOOTPRINTS, "auto", "footprints")
        verdict = self.text(data, "verdict", where, file, rid, required=False) or ""
        verdict_template = None
        if verdict:
            try:
                verdict_template = compile_template(verdict, consts | let_names | keys)
            except ExprError as err:
                self.problem(f"{err.message} in {rid}.verdict", file, data.line_of("verdict"), rid, err.hint,
                             unsafe=err.unsafe)
        evidence = self.evidence(data, columns, file, rid)
        references = self.string_list(data, "references", file, rid)
        for ref in references:
            if not ref.startswith(("https://", "http://")):
                self.problem(f'reference "{ref}" in {rid} must be an http(s) URL', file,
                             data.line_of("references"), rid)
        explains = self.string_list(data, "explains", file, rid)
        calibration = self.text(data, "calibration", where, file, rid, required=False) or ""
        declared_needs = self.capabilities(data, file, rid)
        tests = self.tests(data, file, rid)
        regex_params = {p for _, e in [("", where_expr), *lets, ("", condition), ("", impact)] if e
                        for p in e.regex_params}
        params = [self.check_regex_param(p, file, data, rid) if p.name in regex_params else p for p in params]
        if len(self.problems) > before or condition is None:
            return None
        exprs = [e for e in (where_expr, condition, impact, *(e for _, e in lets)) if e]
        read = {n for e in exprs for n in e.names}
        needs = set(declared_needs) | spec.needs_for(read & columns)  # evidence columns need nothing
        for e in exprs:
            for fact_name in e.facts:
                other = self.facts[fact_name]
                needs |= other.needs_for(c for f, c in e.fact_columns if f == fact_name)
        read |= {*key_columns, *evidence.columns, *(c for c, _ in evidence.sort)}
        return Rule(
            id=fields["id"], name=fields["name"], title=fields["title"], category=category,
            severity=severity, scope=scope, source=source, key_columns=key_columns,
            parameters=tuple(params), where=where_expr, lets=tuple(lets), condition=condition,
            impact=impact, evidence=evidence, message=fields["message"], what=fields["what"],
            why=fields["why"], fix=fields["fix"], calibration=calibration, references=tuple(references),
            explains=tuple(explains), kind=kind, verdict=verdict, verdict_template=verdict_template,
            footprint=how,
            footprint_reads=footprint_reads(columns, scope, how) if impact is not None and kind == "cause" else (),
            tests=tuple(tests), file=file, line=data.line,
            columns=tuple(sorted(read & columns)), template=template, needs=tuple(sorted(needs)),
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
                self.unknown("unit", unit, UNITS, where, file, spec.line_of("unit"), rid, "units")
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
            twice = sorted({c for c in names if names.count(c) > 1})
            if twice:
                self.problem(f'{rid}.evidence.{key} names "{twice[0]}" more than once', file, raw.line_of(key), rid)
                if key == "sort":
                    sort = list({c: (c, a) for c, a in reversed(sort)}.values())[::-1]
                else:
                    cols = list(dict.fromkeys(cols))
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

    def capabilities(self, data: LineDict, file: str, rid: str | None) -> list[str]:
        """The rule's ``needs:`` list: trace capabilities it needs beyond those its facts declare."""
        from analyzer.loading.capabilities import CAPABILITIES

        names = self.string_list(data, "needs", file, rid)
        for name in names:
            if name not in CAPABILITIES:
                self.unknown("capability", name, CAPABILITIES, f"{rid}.needs", file, data.line_of("needs"), rid,
                             "capabilities")
        return names

    def string_list(self, data: LineDict, key: str, file: str, rid: str | None) -> list[str]:
        raw = data.get(key, [])
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
            self.problem(f"{f'{rid}.' if rid else ''}{key} must be a list of text", file, data.line_of(key), rid)
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
            same_id, same_name = seen_ids.get(rule.id), seen_names.get(rule.name)
            if same_id is not None and same_id is same_name:  # the same rule, defined again
                self.problem(f'rule "{rule.name}" ({rule.id}) is defined twice (first at {same_id.file}:'
                             f"{same_id.line})", rule.file, rule.line, rule.id,
                             "to change a rule of another pack use override: (parameters, severity); "
                             "else give this one its own id and name")
            else:
                for key, first in ((rule.id, same_id), (rule.name, same_name)):
                    if first is not None:
                        self.problem(f'duplicate rule {"id" if key == rule.id else "name"} "{key}" '
                                     f"(first defined at {first.file}:{first.line})", rule.file, rule.line,
                                     rule.id, "ids and names identify a rule in reports and --set; make them "
                                     "unique")
            seen_ids.setdefault(rule.id, rule)
            seen_names.setdefault(rule.name, rule)
        names = {r.name for r in rules} | {r.id for r in rules}
        for rule in rules:
            for target in rule.explains:
                if target not in names:
                    self.problem(f'{rule.id}.explains names unknown rule "{target}"', rule.file, rule.line,
                                 rule.id, did_you_mean(target, names))

    def check_test_overrides(self, pack: RulePack) -> None:
        for rule in pack.rules:
            for case in rule.tests:
                if case.sets:
                    try:
                        apply_overrides(pack, case.sets)
                    except ParameterError as err:
                        self.problem(f"{rule.id}.tests: {err}", rule.file, case.line, rule.id)
