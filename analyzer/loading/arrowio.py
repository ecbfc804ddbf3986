"""Frames <-> Arrow, exactly: the columnar form both caches store (:mod:`analyzer.loading.cache` for
loaded traces, :mod:`analyzer.facts.cache` for facts) as LZ4-compressed Arrow IPC files. Integer columns
whose consecutive values differ little (timestamps, ids counting up) are stored as those differences
(:func:`_delta_pays`): at 1 M kernels both caches' entries take 109 MB instead of 206 MB.

:func:`frame_to_table` refuses (:class:`Unstorable`) what :func:`table_to_frame` could not rebuild
exactly; a frame read back has the same columns, dtypes (categorical categories and their type, int
widths, pandas' string dtypes), values and 0..n-1 index, and its numeric columns are writable.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

_SUPPORTED_KINDS = "iufb"


class _Unstorable(Exception):
    pass


Unstorable = _Unstorable  # a frame frame_to_table cannot store exactly (for the fact cache)


def _string_kind(dtype: pd.StringDtype) -> str:
    """``str:STORAGE:NA`` for pandas' string dtypes (``str`` is pandas 3's default text column)."""
    na = "nan" if dtype.na_value is not pd.NA else "NA"
    return f"str:{dtype.storage}:{na}"


def _string_dtype(kind: str) -> pd.StringDtype:
    _, storage, na = kind.split(":")
    if storage not in ("pyarrow", "python") or na not in ("nan", "NA"):
        raise _Unstorable(f"unknown string column kind {kind!r}")
    return pd.StringDtype(storage, na_value=np.nan if na == "nan" else pd.NA)


def frame_to_table(frame: pd.DataFrame):  # -> pyarrow.Table
    """``frame`` as an Arrow table from which :func:`table_to_frame` rebuilds it exactly (columns,
    dtypes incl. categorical categories and int widths, values); raises :class:`Unstorable` for what
    it cannot store: an index other than 0..n-1, columns other than integers, floats, booleans and text
    (object, pandas' string dtypes, categoricals of text)."""
    import pyarrow as pa

    if not isinstance(frame.index, pd.RangeIndex) or frame.index.start != 0 or frame.index.step != 1:
        raise _Unstorable("frame index is not 0..n-1")
    arrays, fields = [], []
    for name in frame.columns:
        meta: dict[str, str] = {}
        if not isinstance(name, str):
            raise _Unstorable(f"column name {name!r}")
        col = frame[name]
        dtype = col.dtype
        if isinstance(dtype, pd.CategoricalDtype):
            cats = dtype.categories
            text_cats = isinstance(cats.dtype, pd.StringDtype)
            if (cats.dtype != object and not text_cats) or dtype.ordered \
                    or not all(isinstance(c, str) for c in cats):
                raise _Unstorable(f"{name}: categorical of {cats.dtype}")
            codes = col.cat.codes.to_numpy()
            kind = f"category:{codes.dtype.str}" + (f":{_string_kind(cats.dtype)}" if text_cats else "")
            arr = pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(list(cats), type=pa.string()))
            if not len(frame):  # an IPC file of no rows keeps no dictionary: the categories go here
                meta["categories"] = json.dumps(list(cats))
        elif isinstance(dtype, pd.StringDtype):
            kind = _string_kind(dtype)
            arr = pa.array(col.array)
            if isinstance(arr, pa.ChunkedArray):
                arr = arr.combine_chunks()
        elif isinstance(dtype, np.dtype) and dtype.kind == "O":
            from analyzer.loading.columns import factorize_objects

            codes, uniques = factorize_objects(col)
            if (codes < 0).any() or not all(isinstance(u, str) for u in uniques):
                raise _Unstorable(f"{name}: object column with non-text values")
            kind = "object"
            arr = pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)),
                                                 pa.array(list(uniques), type=pa.string()))
        elif isinstance(dtype, np.dtype) and dtype.kind in _SUPPORTED_KINDS:
            values = col.to_numpy()
            kind = dtype.str
            if _delta_pays(values):
                kind = f"delta:{dtype.str}"
                values = _differences(values)
            arr = pa.array(values)
        else:
            raise _Unstorable(f"{name}: dtype {dtype}")
        arrays.append(arr)
        fields.append(pa.field(name, arr.type, metadata={"kind": kind, **meta}))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


#: integer columns of at least this many rows are considered for :func:`_delta_pays`
DELTA_FROM_ROWS = 4096
#: rows of each of the three samples :func:`_delta_pays` compares
_DELTA_SAMPLE = 2048


def _delta_pays(values: np.ndarray) -> bool:
    """Whether integer column ``values`` is stored as the differences of consecutive values (``kind``
    ``delta:<dtype>``): timestamps, ids counting up and thread ids in runs, whose differences need a few
    bits where the values need 30-60 (the 1 M-kernel trace's kernel columns: 22 MB after LZ4 as they
    are, 6 MB as differences). Decided on three samples of :data:`_DELTA_SAMPLE` rows (start, middle,
    end): the differences' mean bit length at least 4 below the values'. The differences wrap around in
    the column's own integer type, and so does the sum that rebuilds the values: exact."""
    n = len(values)
    if values.dtype.kind not in "iu" or n < DELTA_FROM_ROWS:
        return False
    k = _DELTA_SAMPLE
    sample = np.concatenate([values[:k], values[n // 2 - k // 2:n // 2 + k // 2], values[n - k:]])
    diffs = np.diff(sample)  # two differences across the samples' seams: negligible among 6,141
    return _bits(diffs) <= _bits(sample) - 4


def _differences(values: np.ndarray) -> np.ndarray:
    """``values[i] - values[i - 1]`` (the first value itself) in the values' integer type, wrapping
    around exactly as :func:`table_to_frame`'s running sum does back (one pass, one new array)."""
    out = np.empty_like(values)
    out[:1] = values[:1]
    np.subtract(values[1:], values[:-1], out=out[1:])
    return out


def _bits(values: np.ndarray) -> float:
    """Mean bit length of ``values`` (their magnitude as floats: no overflow at the type's minimum)."""
    return float(np.mean(np.log2(np.abs(values.astype(np.float64)) + 1)))


def table_to_frame(table) -> pd.DataFrame:  # table: pyarrow.Table
    import pyarrow as pa

    out: dict[str, Any] = {}
    num_rows = table.num_rows
    for field in table.schema:
        kind = (field.metadata or {}).get(b"kind", b"").decode()
        col = table.column(0)
        table = table.remove_column(0)  # the column's Arrow memory goes once converted (when no one else holds the table)
        arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        del col
        if kind.startswith("category:") or kind == "object":
            if not pa.types.is_dictionary(arr.type):
                raise _Unstorable(f"{field.name}: expected dictionary data")
            stated = (field.metadata or {}).get(b"categories")
            names = json.loads(stated) if stated is not None and not len(arr) else arr.dictionary.to_pylist()
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise _Unstorable(f"{field.name}: categories are not text")
            labels = np.empty(len(names), dtype=object)
            labels[:] = names
            codes = arr.indices.to_numpy(zero_copy_only=False)
            if kind == "object":
                out[field.name] = pd.Series(labels[codes] if len(codes) else np.empty(0, dtype=object),
                                            dtype=object, copy=False)
            else:
                _, code_kind, *cat_kind = kind.split(":", 2)
                codes = codes.astype(np.dtype(code_kind), copy=False)
                cat_dtype = _string_dtype(cat_kind[0]) if cat_kind else object
                out[field.name] = pd.Categorical.from_codes(codes, categories=pd.Index(labels, dtype=cat_dtype))
        elif kind.startswith("str:"):
            out[field.name] = pd.Series(pd.array(arr, dtype=_string_dtype(kind)), copy=False)
        elif kind.startswith("delta:") and np.dtype(kind[6:]).kind in "iu":
            values = _writable_values(arr, np.dtype(kind[6:]))
            np.add.accumulate(values, dtype=values.dtype, out=values)  # the differences summed back, in place
            out[field.name] = values
        elif kind and np.dtype(kind).kind in _SUPPORTED_KINDS:
            # writable in the exact dtype (loaded frames are writable, so cached ones are too): the values
            # Arrow decompressed into memory of its own, else a copy
            out[field.name] = _writable_values(arr, np.dtype(kind))
        else:
            raise _Unstorable(f"{field.name}: unknown column kind {kind!r}")
    return pd.DataFrame(out, copy=False) if out else pd.DataFrame(index=pd.RangeIndex(num_rows))


def _writable_values(arr, dtype: np.dtype) -> np.ndarray:  # arr: pyarrow.Array
    """``arr``'s values as a writable numpy array of ``dtype``: a view of Arrow's buffer when that is
    memory Arrow allocated (decompressed: no one else sees it once the table is gone) holding exactly
    these values (integers or floats of that width, no nulls), else a copy."""
    import pyarrow as pa

    if arr.null_count == 0 and dtype.kind in "iuf" and not pa.types.is_boolean(arr.type):
        buf = arr.buffers()[1]
        if (buf is not None and buf.is_mutable and np.dtype(arr.type.to_pandas_dtype()) == dtype
                and buf.size >= (arr.offset + len(arr)) * dtype.itemsize):
            view = np.frombuffer(buf, dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)
            if view.flags.writeable:
                return view
    return np.array(arr.to_numpy(zero_copy_only=False), dtype=dtype, copy=True)


def frame_from_ipc(data: bytes) -> pd.DataFrame:
    """:func:`table_to_frame` of the Arrow IPC file ``data``, each column's Arrow memory freed once it is
    converted (the table lives only here): at most one column is held twice."""
    return table_to_frame(ipc_table(data))


def ipc_bytes(table) -> bytes:  # table: pyarrow.Table
    """``table`` as an LZ4-compressed Arrow IPC file (Arrow's compression releases the GIL)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def ipc_table(data: bytes):  # -> pyarrow.Table
    import pyarrow as pa

    # the system allocator: Arrow memory freed while a frame is converted is reused by numpy (Arrow's own pool
    # keeps it), so a frame read back peaks near its own size rather than twice it
    return pa.ipc.open_file(pa.BufferReader(data), memory_pool=pa.system_memory_pool()).read_all()
