"""Expression checking and vectorized evaluation over a frame."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analyzer.rules.expr import Env, EvalError, ExprError, Names, check_pattern, compile_expr, evaluate

from .conftest import MS, kernels_frame

COLUMNS = frozenset(kernels_frame().columns)
NAMES = Names(columns=COLUMNS, consts=frozenset({"min_dur", "window_ns", "pattern"}),
              text_params=frozenset({"pattern"}), lets=frozenset({"total"}), keys=frozenset({"name"}))
CONSTS = {"min_dur": 20_000, "window_ns": 100 * MS, "pattern": "^elem"}


def row(source: str) -> pd.Series:
    return evaluate(compile_expr(source, "row", NAMES), Env(consts=CONSTS, rows=kernels_frame()))


def group_env() -> Env:
    rows = kernels_frame()
    codes = rows.groupby("name", sort=True).ngroup().to_numpy()
    keys = pd.DataFrame({"name": sorted(rows["name"].unique())})
    return Env(consts=CONSTS, rows=rows, codes=codes, keys=keys)


def group(source: str, env: Env | None = None) -> pd.Series:
    return evaluate(compile_expr(source, "group", NAMES), env or group_env())


ROW_CASES = [
    ("duration >= min_dur", [True, False, False, True]),
    ("duration >= 20us", [True, False, False, True]),
    ("duration > 10us and duration < 100us", [False, False, False, True]),
    ("10us < duration < 100us", [False, False, False, True]),
    ("not (duration >= min_dur)", [False, True, True, False]),
    ("duration < 10us or name == 'reduce_kernel'", [False, True, True, True]),
    ('matches(name, "gemm|reduce")', [True, False, False, True]),
    ("matches(name, pattern)", [False, True, True, False]),
    ('startswith(name, "volta")', [True, False, False, False]),
    ('contains(name, "wise")', [False, True, True, False]),
    ("(duration if duration > 10us else 0) > 0", [True, False, False, True]),
    ("abs(-duration) == duration", [True, True, True, True]),
    ("min(duration, 10us) == 10us", [True, False, False, True]),
    ("clip(duration, 5us, 50us) == 50us", [True, False, False, False]),
    ("duration % 2 == 0", [True, True, True, True]),
    ("log10(duration) > 5", [True, False, False, False]),
    ("sqrt(duration ** 2) == duration", [True, True, True, True]),
]


@pytest.mark.parametrize(("source", "first_four"), ROW_CASES, ids=[c for c, _ in ROW_CASES])
def test_row_expression_is_vectorized(source, first_four):
    result = row(source)
    assert isinstance(result, pd.Series) and len(result) == 20
    assert result.astype(bool).tolist()[:4] == first_four


@pytest.mark.parametrize("source", ['matches(name, "gemm|reduce")', 'startswith(name, "elem")',
                                    'contains(name, "wise")', "matches(name, pattern)"])
def test_text_tests_on_categorical_text(source):
    """The loader's text columns are categoricals: a text test reads their codes (a missing value and an
    unused category that every pattern matches, last, included) and answers as on the text held as
    Python strings."""
    plain = kernels_frame()
    plain.loc[5, "name"] = None
    coded = plain.copy()
    last = "elementwise_unused_gemm"
    coded["name"] = pd.Categorical(plain["name"], categories=[*sorted(plain["name"].dropna().unique()), last])
    expr = compile_expr(source, "row", NAMES)
    got = evaluate(expr, Env(consts=CONSTS, rows=coded))
    want = evaluate(expr, Env(consts=CONSTS, rows=plain))
    assert got.tolist() == want.tolist()
    assert got[5] is np.False_ and got.dtype == bool


GROUP_CASES = [  # groups (sorted): elementwise_kernel, reduce_kernel, volta_sgemm_128x64_nn
    ("count()", [10, 5, 5]),
    ("sum(duration)", [45_000, 150_000, 4_000_000]),
    ("mean(duration)", [4_500, 30_000, 800_000]),
    ("max(duration)", [5_000, 30_000, 800_000]),
    ("min(duration)", [4_000, 30_000, 800_000]),
    ("median(duration)", [4_500, 30_000, 800_000]),
    ("p(duration, 100)", [5_000, 30_000, 800_000]),
    ("share(duration < 5us)", [0.5, 0.0, 0.0]),
    ("any(stream == 13)", [True, True, True]),
    ("all(stream == 7)", [False, False, False]),
    ("nunique(nvtx_path)", [2, 2, 2]),
    ("first(start)", [2 * MS, 6 * MS, 0]),
    ("sum(duration) / window_ns", [0.00045, 0.0015, 0.04]),
    ("name == 'reduce_kernel'", [False, True, False]),
    ("max(sum(duration), 100us)", [100_000, 150_000, 4_000_000]),
]


@pytest.mark.parametrize(("source", "expected"), GROUP_CASES, ids=[c for c, _ in GROUP_CASES])
def test_group_expression(source, expected):
    result = group(source)
    assert result.tolist() == pytest.approx(expected)


def test_let_broadcast_inside_aggregate():
    env = group_env()
    env.lets["total"] = group("sum(duration)", env)
    assert group("sum(duration / total)", env).tolist() == pytest.approx([1.0, 1.0, 1.0])


def test_empty_groups_get_neutral_values():
    rows = kernels_frame().iloc[:0]
    env = Env(consts=CONSTS, rows=rows, codes=np.zeros(0, dtype=np.int64), keys=pd.DataFrame(index=range(1)))
    assert group("count()", env).tolist() == [0]
    assert group("sum(duration)", env).tolist() == [0]
    assert group("any(duration > 0)", env).tolist() == [False]
    assert np.isnan(group("mean(duration)", env).iloc[0])


def test_division_by_zero_is_inf_not_an_exception():
    assert np.isinf(group("count() / 0").iloc[0])


def test_text_arithmetic_is_refused_at_run_time():
    with pytest.raises(EvalError, match="arithmetic on text"):
        row("name * 1000000000 == name")


STATIC_ERRORS = [
    ("row", "sum(duration) > 0", "not allowed in where"),
    ("group", "duration > 0", 'column "duration" must be inside an aggregate'),
    ("group", "sum(durration)", 'unknown column "durration"'),
    ("group", "sum(sum(duration))", "inside another aggregate"),
    ("row", "total > 0", "cannot be used in where"),
    ("group", "p(duration, 120)", "between 0 and 100"),
    ("group", "p(duration, min_dur)", "between 0 and 100"),
    ("group", "median(duration, 2)", "called with 2 argument"),
    ("group", "summ(duration)", 'unknown function "summ"; did you mean "sum"?'),
    ("row", 'matches(name, name)', "string literal or a text parameter"),
    ("row", "matches(name, '[')", "invalid regex"),
    ("row", "duration >", "syntax error"),
    ("group", 'fact_sum("nope", "x")', 'unknown fact "nope"'),
    ("row", "duration in (1, 2)", "not allowed"),
]


@pytest.mark.parametrize(("level", "source", "message"), STATIC_ERRORS, ids=[s for _, s, _ in STATIC_ERRORS])
def test_static_errors(level, source, message):
    with pytest.raises(ExprError) as info:
        compile_expr(source, level, NAMES)
    assert message in f"{info.value.message}; {info.value.hint}"


@pytest.mark.parametrize("pattern", [r"(a)\1", "(?P<x>a)(?P=x)", "a(?=b)", "(?<!a)b", "a" * 300])
def test_unsupported_regexes_are_refused(pattern):
    with pytest.raises(ExprError):
        check_pattern(pattern)


@pytest.mark.parametrize("pattern", ["(a+)+$", "(a*)*b", "(a|aa)*c", "((ab)+)+", "(x+x+)+y", r"(\w+\s?)*$"])
def test_backtracking_regexes_run_in_linear_time(pattern):
    """What would backtrack catastrophically in Python's re is linear on RE2: 100,000 characters of
    the worst-case text in well under a second."""
    import time

    compiled = check_pattern(pattern)
    started = time.perf_counter()
    compiled.search("a" * 100_000 + "!")
    compiled.search("x" * 50_000 + " " * 50_000 + "!")
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("pattern", ["gemm|conv", "^void at::native::", r"sm\d+_xmma", "(ab)+", "[(+*)]+",
                                     "(?:nccl)?Kernel"])
def test_ordinary_regexes_are_accepted(pattern):
    check_pattern(pattern)
