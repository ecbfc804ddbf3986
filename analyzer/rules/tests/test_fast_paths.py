"""The rule engine's shortcuts give what the general code gives, on a real trace's columns:
whole-column aggregates for a single group, and the columns kept after ``where``."""
from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from analyzer.rules.expr import _categorical_nunique, _one_group
from analyzer.testing import real_trace

AGGREGATES = ("sum", "mean", "share", "min", "max", "any", "all", "nunique", "median")


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
    assert _one_group("median", cols["float with NaN"], zeros, 1) is None  # the groupby skips NaN
    assert _one_group("first", cols["int64"], zeros, 1) is None


def _groupby_nunique(values: pd.Series, codes: np.ndarray, ngroups: int) -> pd.Series:
    return values.groupby(codes).nunique().reindex(range(ngroups)).reset_index(drop=True)


def test_categorical_nunique_equals_the_groupby(kernels):
    """Distinct values per group from a categorical's codes: the kernels' names (dictionary-coded text as
    the loader makes it), with missing values, in one group and in several."""
    name = kernels["name"]
    assert isinstance(name.dtype, pd.CategoricalDtype)
    gapped = name.where(kernels["duration"].to_numpy() % 5 != 0)  # missing values: never counted
    n = len(kernels)
    groupings = {
        "one": (np.zeros(n, dtype=np.int64), 1),
        "device": (pd.factorize(kernels["device"])[0].astype(np.int64), kernels["device"].nunique()),
        "by row": (np.arange(n, dtype=np.int64) % 7, 7),
    }
    for label, (codes, ngroups) in groupings.items():
        for values in (name, gapped, kernels["short_name"]):
            fast = _categorical_nunique(values, codes, ngroups)
            assert fast is not None, label
            pd.testing.assert_series_equal(fast, _groupby_nunique(values, codes, ngroups), check_exact=True,
                                           obj=f"nunique({values.name}) by {label}")
    # a group without rows: the groupby leaves it out (the engine then fills it), so no shortcut
    assert _categorical_nunique(name, np.zeros(n, dtype=np.int64), 2) is None


def test_integer_key_groups_equal_the_groupby(kernels):
    """One integer key (a device, a stream): groups numbered by sorted value and the first row of each,
    as the pandas groupby numbers them; here keyed by integer columns with one and with many values, the
    rows out of key order."""
    from analyzer.rules.engine import _groups

    rows = kernels.iloc[::-1].reset_index(drop=True)
    for column in ("device", "grid_x", "block_x", "registers_per_thread"):
        rule = SimpleNamespace(scope="device", key_columns=(column,))
        codes, keys = _groups(rows, rule)  # type: ignore[arg-type]
        slow = rows.groupby([column], sort=True, dropna=False).ngroup().to_numpy()
        assert codes.dtype == slow.dtype and (codes == slow).all(), column
        expected = rows.iloc[np.unique(slow, return_index=True)[1]][[column]].reset_index(drop=True)
        expected.columns = ["device"]
        pd.testing.assert_frame_equal(keys, expected)
    assert rows["grid_x"].nunique() > 1  # the many-valued case was met
