"""The rule engine's shortcuts give what the general code gives, on a real trace's columns:
whole-column aggregates for a single group, and the columns kept after ``where``."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from analyzer.rules.expr import _one_group
from analyzer.testing import real_trace

AGGREGATES = ("sum", "mean", "share", "min", "max", "any", "all", "nunique")


@pytest.fixture(scope="module")
def kernels() -> pd.DataFrame:
    from analyzer.loading import load_trace

    return load_trace(real_trace("tiny_kernels")).kernels


def _columns(k: pd.DataFrame) -> dict[str, pd.Series]:
    duration = k["duration"].astype(np.int64)
    return {
        "int64": duration,
        "int32": k["grid_x"],
        "bool": duration < 10_000,
        "float": duration / 3.0,
        "float with NaN": (duration / 7.0).where(duration % 3 == 0),
        "all NaN": pd.Series(np.full(len(k), np.nan)),
        "huge": duration * (1 << 40),
    }


@pytest.mark.parametrize("name", AGGREGATES)
def test_one_group_equals_the_groupby(kernels, name):
    taken = 0
    for label, values in _columns(kernels).items():
        if name in ("any", "all", "share"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values = values.fillna(False).astype(bool)
        codes = np.zeros(len(values), dtype=np.int64)
        fast = _one_group(name, values, codes, 1)
        if fast is None:
            continue
        taken += 1
        method = "mean" if name == "share" else name
        slow = getattr(values.groupby(codes), method)().reindex(range(1)).reset_index(drop=True)
        pd.testing.assert_series_equal(fast, slow, check_exact=True, obj=f"{name}({label})")
    assert taken  # the shortcut served at least one column type
    two = np.arange(len(kernels)) % 2  # two groups: never the shortcut
    assert _one_group(name, _columns(kernels)["int64"], two, 2) is None


def test_one_group_leaves_inexact_sums_to_the_groupby(kernels):
    cols = _columns(kernels)
    zeros = np.zeros(len(kernels), dtype=np.int64)
    assert _one_group("sum", cols["float"], zeros, 1) is None  # float sums round by summation order
    assert _one_group("sum", cols["huge"], zeros, 1) is None  # beyond float64's exact integers (mean)
    assert _one_group("mean", cols["huge"], zeros, 1) is None
    assert _one_group("median", cols["int64"], zeros, 1) is None
