"""Compact columns for the trace model (see the dtype notes in :mod:`analyzer.loading.model`).

* :class:`TextCodes` is a text column in the making: integer codes into a table of labels (``-1``
  reads ``""``). Loaders gather them (``take``) along joins without touching a string, and turn them
  into a pandas categorical once, at the end (:meth:`TextCodes.categorical`).
* :func:`categorical` builds that categorical: categories are the distinct texts actually used,
  sorted (so sorting by the column sorts lexically), of ``object`` dtype; codes take the smallest
  integer type pandas allows for their number (int8 below 128 distinct values).
* :func:`narrow_int` stores an id-like integer column in 32 bits when its values allow.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

_I32 = np.iinfo(np.int32)


def narrow_int(values: np.ndarray) -> np.ndarray:
    """``values`` as ``int32`` when every value fits, else unchanged."""
    values = np.asarray(values)
    if values.dtype == np.int32 or values.dtype.kind not in "iu":
        return values
    if len(values) and (values.min() < _I32.min or values.max() > _I32.max):
        return values
    return values.astype(np.int32)


def categorical(codes: np.ndarray, labels: Sequence[str] | np.ndarray) -> pd.Categorical:
    """``labels[codes]`` (code ``-1``: ``""``) as a categorical with sorted, used, distinct categories.

    ``labels`` may repeat a text (two string ids with the same text, ``""`` among them); rows with
    equal text get one code. Work is one ``bincount`` over the rows and a sort of the used labels."""
    table = np.empty(len(labels) + 1, dtype=object)
    table[:-1] = labels
    table[-1] = ""
    codes = np.asarray(codes)
    n = len(codes)
    if n == 0:
        return pd.Categorical.from_codes(np.empty(0, dtype=np.int8), categories=pd.Index([], dtype=object))
    if codes.min() < 0:
        codes = np.where(codes < 0, len(table) - 1, codes)
    used = np.flatnonzero(np.bincount(codes, minlength=len(table)))
    texts = np.array([t if isinstance(t, str) else "" for t in table[used]], dtype=object)
    cats, inverse = np.unique(texts, return_inverse=True)
    remap = np.full(len(table), -1, dtype=np.int32)
    remap[used] = inverse.reshape(-1)
    out = remap[codes]
    return pd.Categorical.from_codes(out, categories=pd.Index(cats, dtype=object))


@dataclass(frozen=True)
class TextCodes:
    """A text column as ``codes`` into ``labels`` (``-1``: ``""``)."""

    codes: np.ndarray
    labels: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray | pd.Series) -> TextCodes:
        """Codes of an object column of texts (equal strings share a code)."""
        from analyzer.facts._util import factorize_objects

        codes, uniques = factorize_objects(values)
        return cls(np.asarray(codes), np.asarray(uniques, dtype=object))

    def take(self, rows: np.ndarray) -> TextCodes:
        """The codes of ``rows`` (``-1``: none -> ``""``)."""
        padded = np.append(self.codes, -1)
        return TextCodes(padded[rows], self.labels)

    def categorical(self) -> pd.Categorical:
        return categorical(self.codes, self.labels)

