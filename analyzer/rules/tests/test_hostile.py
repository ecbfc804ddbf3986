"""Hostile rule files: each is refused cleanly (a typed error, nothing executed, no traceback)."""
from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.errors import RuleError, UnsafeRuleError
from analyzer.rules import load_pack

from .conftest import FACTS, SCALARS, pack_text, rule

MARKER = "/tmp/analyzer-rules-pwned"

# name -> (rule-file text, error class, text in the message)
YAML_ATTACKS = {
    "python-object-apply-tag": (
        f'version: 1\nrules: !!python/object/apply:os.system ["touch {MARKER}"]\n',
        UnsafeRuleError, "YAML tag not allowed"),
    "python-name-tag": ("version: !!python/name:os.system\nrules: []\n", UnsafeRuleError, "YAML tag not allowed"),
    "billion-laughs": (
        "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
                  f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
                  for i in range(8))
        + "version: 1\nrules: *i\n",
        UnsafeRuleError, "YAML alias *a is not allowed"),
    "huge-document": ("version: 1\nrules: []\n# " + "x" * (2 << 20) + "\n", UnsafeRuleError, "byte limit"),
    # issue 33: these were internal errors (exit 3)
    "nul-byte": ("version: 1\nrules: []\n# \x00\n", RuleError, "character U.0000 is not allowed"),
    "integer-of-5000-digits": ("version: 1\nrules: []\nx: 1" + "0" * 5000 + "\n", RuleError, "cannot be read"),
    "nul-in-extends-path": ('version: 1\nextends: ["a\\0b"]\n', RuleError, "extends: holds a NUL byte"),
}


@pytest.mark.parametrize("attack", list(YAML_ATTACKS), ids=list(YAML_ATTACKS))
def test_hostile_yaml(attack, write):
    text, error, message = YAML_ATTACKS[attack]
    path = write(text)
    with pytest.raises(error, match=message.replace("*", r"\*")):
        load_pack(path, facts=FACTS, scalars=SCALARS)
    assert not Path(MARKER).exists()


# rule field changes -> text in the UnsafeRuleError message
EXPRESSION_ATTACKS = {
    "import-in-condition": ({"condition": f"__import__('os').system('touch {MARKER}')"}, "only plain function calls"),
    "import-name": ({"condition": "__import__('os')"}, "is not allowed"),
    "dunder-class-bases": ({"condition": "().__class__.__bases__"}, "not allowed"),
    "attribute-on-column": ({"where": "duration.real > 0"}, "attribute access (.real) is not allowed"),
    "builtin-call": ({"condition": f"open('{MARKER}', 'w')"}, 'unknown function "open"'),
    "eval-call": ({"condition": "eval('1')"}, 'unknown function "eval"'),
    "subscript": ({"where": "host_api[0] == 'c'"}, "indexing"),
    "lambda": ({"condition": "(lambda: 1)()"}, "only plain function calls"),
    "lambda-value": ({"condition": "lambda: 1"}, "Lambda is not allowed"),
    "comprehension": ({"condition": "[x for x in gaps]"}, "ListComp is not allowed"),
    "fstring": ({"where": "f'{duration.__class__}' == 'x'"}, "JoinedStr is not allowed"),
    "walrus": ({"condition": "(x := 1)"}, "NamedExpr is not allowed"),
    "keyword-argument": ({"let": {"idle_ns": "sum(x=duration)", "gaps": "count()", "share": "0"}},
                         "takes no keyword arguments"),
    "huge-exponent": ({"condition": "10**10**10 > 0"}, "exponent of ** must be a number literal"),
    "literal-past-float": ({"condition": "1" + "0" * 400 + " > 0"}, "(401 digits) is out of range"),
    "parameter-past-float": ({"parameters": {"min_gap": {"default": "1" + "0" * 400 + "ms", "unit": "duration",
                                                          "doc": "x"}}}, "is not a finite number"),
    "exponent-from-column": ({"where": "2 ** duration > 0"}, "exponent of ** must be a number literal"),
    "deeply-nested": ({"condition": "-" * 100 + "1 > 0"}, "nested more than"),
    "nested-parentheses": ({"condition": "(" * 300 + "1" + ")" * 300}, ""),
    "too-many-parts": ({"condition": "1+" * 300 + "1 > 0"}, "more than 400 parts"),
    "regex-backreference": ({"where": r'matches(host_nvtx_path, "(a)\\1")'}, "back-references"),
    "regex-param-backreference": ({"parameters": {"pat": {"default": "(x)(?P=x)", "unit": "text", "doc": "d"}},
                                   "where": "matches(host_nvtx_path, pat)"}, "back-references"),
    "regex-lookahead": ({"where": 'matches(host_nvtx_path, "a(?=b)")'}, "look-around"),
    "regex-too-long": ({"where": 'matches(host_nvtx_path, "' + "a" * 300 + '")'}, "over the limit"),
    "private-name": ({"condition": "_secret > 0"}, "reserved"),
    "template-dunder-mro": ({"message": "{{ ''.__class__.__mro__ }}"}, "attribute and item access"),
    "template-cycler-globals": ({"message": "{{ cycler.__init__.__globals__ }}"}, "attribute and item access"),
    "template-include": ({"message": "{% include '/etc/passwd' %}"}, "include / import / extends"),
    "template-import": ({"message": "{% import 'x' as y %}"}, "include / import / extends"),
    "template-call": ({"message": "{{ range(10) }}"}, "calls are not allowed"),
    "template-item": ({"message": "{{ device['x'] }}"}, "attribute and item access"),
    "template-loop": ({"message": "{% for i in device %}{{ i }}{% endfor %}"}, "For is not allowed"),
    "template-set": ({"message": "{% set x = 1 %}"}, "Assign is not allowed"),
    "template-power": ({"message": "{{ 10 ** 10 ** 10 }}"}, "Pow is not allowed"),
}


@pytest.mark.parametrize("attack", list(EXPRESSION_ATTACKS), ids=list(EXPRESSION_ATTACKS))
def test_hostile_expressions_and_templates(attack, write):
    changes, message = EXPRESSION_ATTACKS[attack]
    path = write(pack_text(rule(**changes)))
    with pytest.raises(RuleError) as info:
        load_pack(path, facts=FACTS, scalars=SCALARS)
    assert message in str(info.value)
    assert info.value.file == str(path) and info.value.line
    assert not Path(MARKER).exists()


@pytest.mark.parametrize("attack", ["import-in-condition", "dunder-class-bases", "attribute-on-column",
                                    "builtin-call", "huge-exponent", "regex-backreference", "template-dunder-mro",
                                    "template-cycler-globals", "template-include"])
def test_attacks_are_unsafe_rule_errors(attack, write):
    path = write(pack_text(rule(**EXPRESSION_ATTACKS[attack][0])))
    with pytest.raises(UnsafeRuleError):
        load_pack(path, facts=FACTS, scalars=SCALARS)


def test_rule_id_collision(write):
    path = write(pack_text(rule(), rule(name="sneaky-override")))
    with pytest.raises(RuleError, match='duplicate rule id "GPU001"'):
        load_pack(path, facts=FACTS, scalars=SCALARS)


def test_text_arithmetic_cannot_allocate(write):
    """``host_api * 10**9`` would build gigabyte strings per row: refused when evaluated."""
    from analyzer.rules import evaluate
    from analyzer.rules.model import RuleEvaluationError

    from .conftest import WINDOW, FakeStore

    path = write(pack_text(rule(where="(host_api * 1000000000) == host_api")))
    pack = load_pack(path, facts=FACTS, scalars=SCALARS)
    with pytest.raises(RuleEvaluationError, match="arithmetic on text"):
        evaluate(pack, FakeStore(), WINDOW, {})


@pytest.mark.parametrize("pattern", ["(a+)+$", "(x|xx)*y", "(a|a?)+b", "(.*a){20}b"])
def test_catastrophic_regex_runs_in_linear_time(pattern, write):
    """The classic ReDoS patterns are accepted (RE2 matches in linear time) and evaluate on 100,000
    characters in well under a second; Python's backtracking engine would not finish."""
    import time

    import pandas as pd

    from analyzer.rules.expr import check_pattern

    compiled = check_pattern(pattern)
    text = "a" * 100_000 + "!"
    started = time.perf_counter()
    assert compiled.search(text) is False
    assert compiled.search(pd.Series([text]).iloc[0]) is False
    assert time.perf_counter() - started < 1.0
    path = write(pack_text(rule(where=f'matches(host_nvtx_path, "{pattern}")')))
    load_pack(path, facts=FACTS, scalars=SCALARS)
