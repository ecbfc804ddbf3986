"""Compact columns for the trace model (see the dtype notes in :mod:`analyzer.loading.model`).

* :class:`TextCodes` is a text column in the making: integer codes into a table of labels (``-1``
  reads ``""``). Loaders gather them (``take``) along joins without touching a string, and turn them
  into a pandas categorical once, at the end (:meth:`TextCodes.categorical`).
* :func:`categorical` builds that categorical: categories are the distinct texts actually used,
  sorted (so sorting by the column sorts lexically), of ``object`` dtype; codes take the smallest
  integer type pandas allows for their number (int8 below 128 distinct values).
* :func:`narrow_int` stores an id-like integer column in 32 bits (or 16 or 8, where asked) when its
  values allow.
* :func:`empty_typed` is an empty frame of given columns and dtypes (the contract of a table or fact
  that has no rows on this trace).
* :func:`shared_constants` stores an integer column that holds one value in every row once: a read-only
  view of a single element (stride 0), no memory per row.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pandas._libs import hashtable


_EMPTY_FRAMES: dict[tuple[tuple[str, np.dtype], ...], pd.DataFrame] = {}


def empty_typed(dtypes: Iterable[tuple[str, Any]]) -> pd.DataFrame:
    """An empty frame with these ``(column, numpy dtype)`` columns, in order. Built once per distinct column
    set and copied after that: a frame built from a dict of empty Series costs ~5 ms for 30 columns (each
    Series, and the text Index of the column names), a copy of it 30 us, and a small trace asks for
    dozens of empty tables and facts. Built from empty numpy arrays, not Series: the same frame in less
    than half the time (0.38 against 0.93 ms for the 30 kernel columns)."""
    key = tuple((str(c), np.dtype(d)) for c, d in dtypes)
    frame = _EMPTY_FRAMES.get(key)
    if frame is None:
        frame = pd.DataFrame({c: np.empty(0, dtype=d) for c, d in key}, copy=False)
        if len(_EMPTY_FRAMES) < 512:  # column sets come from the code, not the trace; bounded anyway
            _EMPTY_FRAMES[key] = frame
    return frame.copy()


def narrow_int(values: np.ndarray, smallest: Any = np.int32) -> np.ndarray:
    """``values`` in the smallest signed type from ``smallest`` up to ``int32`` that holds every value,
    else unchanged (64-bit values, non-integers). The default: ``int32`` when every value fits."""
    values = np.asarray(values)
    if values.dtype.kind not in "iu":
        return values
    floor = np.dtype(smallest)
    if values.dtype == np.int32 and floor == np.int32:
        return values
    if values.dtype.kind == "i" and floor.itemsize <= values.dtype.itemsize <= 4 and not len(values):
        return values
    lo, hi = (int(values.min()), int(values.max())) if len(values) else (0, 0)
    for dtype in _NARROW_TYPES:
        if dtype.itemsize < floor.itemsize:
            continue
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
            return values if values.dtype == dtype else values.astype(dtype)
    return values


_NARROW_TYPES = (np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32))


def constant_view(values: np.ndarray, min_rows: int = 4096) -> np.ndarray:
    """``values`` as a read-only view of one element repeated (stride 0) when it is a 1-d integer or bool
    array of at least ``min_rows`` rows all equal, else ``values`` unchanged. The view owns its one
    element (it does not keep ``values``' buffer alive) and reads like the array everywhere numpy and
    pandas read (gathers, masks, comparisons, reductions and copies give ordinary arrays)."""
    if values.ndim != 1 or len(values) < min_rows or values.dtype.kind not in "iub" or values.strides == (0,):
        return values
    first = values[0]
    if (values != first).any():
        return values
    return np.broadcast_to(np.array(first, dtype=values.dtype), values.shape)


#: the trace's per-row frames whose constant integer columns ``load_trace`` stores once (:func:`shared_constants`)
SHARED_CONSTANT_FRAMES = frozenset({"kernels", "memcpy", "memset", "api", "sync", "memory"})


def shared_constants(frame: pd.DataFrame, min_rows: int = 4096) -> pd.DataFrame:
    """``frame`` with each integer or bool column that holds one value in every row (device, context,
    launch type, graph ids, process, CUDA return value on most traces) stored as a :func:`constant_view`:
    at ten million kernels and twenty million API calls about 0.27 GB of the trace model. Other columns are
    shared with ``frame``, not copied; ``frame`` itself is unchanged. The views are read-only, as every
    column of a copy-on-write frame already is to ``to_numpy()``; and pandas writes into the returned frame's
    own columns in place, so ``out.loc[rows, c] = v`` raises ``ValueError`` (read-only): replace the column
    (``out[c] = ...``) or write into a ``copy()``."""
    if len(frame) < min_rows:
        return frame
    views = {}
    for c in frame.columns:
        col = frame[c]
        if isinstance(col.dtype, np.dtype) and col.dtype.kind in "iub":
            values = col.to_numpy()
            view = constant_view(values, min_rows)
            if view is not values:
                views[c] = view
    if not views:
        return frame
    # built, not assigned column by column: ``out[c] = array`` copies the array
    return pd.DataFrame({c: views[c] if c in views else frame[c] for c in frame.columns}, index=frame.index,
                        copy=False)


def take(values: np.ndarray, rows: np.ndarray, fill: int = -1) -> np.ndarray:
    """``values[rows]`` with ``fill`` where a row is -1 (a failed join), without a padded copy of
    ``values``."""
    if len(values) == 0:
        return np.full(len(rows), fill, dtype=values.dtype)
    out = values[rows]
    miss = rows < 0
    if miss.any():
        out[miss] = fill
    return out


def categorical(codes: np.ndarray, labels: Sequence[str] | np.ndarray) -> pd.Categorical:
    """``labels[codes]`` (code ``-1``: ``""``) as a categorical with sorted, used, distinct categories.

    ``labels`` may repeat a text (two string ids with the same text, ``""`` among them); rows with
    equal text get one code. Work is one pass marking the used labels, a sort of those, and one gather
    of the rows' new codes, built in the integer type pandas keeps them in (no conversion or range check
    afterwards: they are valid by construction)."""
    table = np.empty(len(labels) + 1, dtype=object)
    table[:-1] = labels
    table[-1] = ""
    codes = np.asarray(codes)
    n = len(codes)
    if n == 0:
        return pd.Categorical.from_codes(np.empty(0, dtype=np.int8), categories=pd.Index([], dtype=object))
    if codes.min() < -1:
        codes = np.where(codes < 0, -1, codes)
    present = np.zeros(len(table), dtype=bool)
    present[codes] = True  # code -1 marks the last entry, ""
    used = np.flatnonzero(present)
    texts = np.array([t if isinstance(t, str) else "" for t in table[used]], dtype=object)
    cats, inverse = np.unique(texts, return_inverse=True)
    remap = np.full(len(table), -1, dtype=_code_dtype(len(cats)))
    remap[used] = inverse.reshape(-1)
    out = remap[codes]  # code -1 reads the last entry
    dtype = pd.CategoricalDtype(pd.Index(cats, dtype=object))
    try:
        return pd.Categorical.from_codes(out, dtype=dtype, validate=False)
    except TypeError:  # pandas < 2.1 always validates
        return pd.Categorical.from_codes(out, dtype=dtype)


def _code_dtype(n_categories: int) -> type[np.signedinteger]:
    """The integer type pandas stores a categorical's codes in for ``n_categories`` categories."""
    for dtype in (np.int8, np.int16, np.int32):
        if n_categories < np.iinfo(dtype).max:
            return dtype
    return np.int64


def factorize_objects(values: pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(values)`` (NA -> code -1) as ``(codes, uniques ndarray)``, faster on text.

    For an object array whose values are all ``str``, pandas hashes every row's characters (its
    string hash table): 0.25 s per million demangled kernel names of ~1 kB. Python's own ``str``
    hash is cached on the (shared) string objects, so its object hash table takes a third of that.
    Both tables group by equality and number uniques by first appearance: same codes, same uniques.
    Non-object input goes to ``pd.factorize`` unchanged."""
    if isinstance(getattr(values, "dtype", None), pd.CategoricalDtype):
        # dictionary-coded text (the loader's compact columns): factorize the small integer codes,
        # then name each by its category; same codes and uniques as factorizing the texts
        cat: Any = values.array if isinstance(values, pd.Series) else values
        int_codes, first = pd.factorize(np.asarray(cat.codes))
        if (first < 0).any():  # a missing value (code -1) is not a unique: renumber without it
            keep = first >= 0
            renum = np.full(len(first), -1, dtype=np.intp)
            renum[keep] = np.arange(int(keep.sum()))
            int_codes = np.where(int_codes >= 0, renum[int_codes], -1)
            first = first[keep]
        uniques = np.array(cat.categories, dtype=object)[first]
        return np.asarray(int_codes, dtype=np.intp), uniques
    arr = values.to_numpy() if isinstance(values, pd.Series) else np.asarray(values)
    if arr.dtype != object:
        codes, uniques = pd.factorize(values)
        return codes, np.asarray(uniques)
    table = hashtable.PyObjectHashTable(max(len(arr), 1))
    uniques, codes = table.factorize(arr, na_sentinel=-1, na_value=None, mask=None, ignore_na=True)
    return codes.astype(np.intp, copy=False), uniques


def key_groups(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(order, starts, ends)``: a stable order of ``keys`` grouping equal keys, and each group's
    ``[start, end)`` in that order (one sort for any number of keys, then slices)."""
    keys = np.asarray(keys)
    if keys.dtype.kind in "iu" and len(keys) > 1024:
        if keys.min() == keys.max():  # one key (one device, one thread): every row in order, no hashing
            return np.arange(len(keys)), np.zeros(1, dtype=np.int64), np.full(1, len(keys), dtype=np.int64)
        # few distinct keys (threads, devices): one comparison per key instead of a stable sort of all
        distinct = pd.unique(keys)
        if len(distinct) <= _FEW_KEYS:
            parts = [np.flatnonzero(keys == k) for k in np.sort(distinct)]
            sizes = np.cumsum([len(p) for p in parts])
            return np.concatenate(parts), np.r_[0, sizes[:-1]], sizes
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    cut = np.flatnonzero(sk[1:] != sk[:-1]) + 1
    return order, np.r_[0, cut], np.r_[cut, len(sk)]


#: :func:`key_groups` finds the rows of at most this many distinct keys by comparison, not by sorting
_FEW_KEYS = 8


@dataclass(frozen=True)
class TextCodes:
    """A text column as ``codes`` into ``labels`` (``-1``: ``""``)."""

    codes: np.ndarray
    labels: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray | pd.Series) -> TextCodes:
        """Codes of an object column of texts (equal strings share a code)."""
        codes, uniques = factorize_objects(values)
        return cls(np.asarray(codes), np.asarray(uniques, dtype=object))

    def take(self, rows: np.ndarray) -> TextCodes:
        """The codes of ``rows`` (``-1``: none -> ``""``)."""
        return TextCodes(take(self.codes, rows), self.labels)

    def categorical(self) -> pd.Categorical:
        return categorical(self.codes, self.labels)

