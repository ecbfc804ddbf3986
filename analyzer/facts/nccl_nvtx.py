"""NCCL's own NVTX ranges: which domains are internal, and what their payloads say.

NCCL (>= 2.19) opens an NVTX range in domain ``NCCL`` around each API call (``ncclAllReduce``,
``ncclGroupEnd``, ``ncclCommInitRank`` ...) with a payload: communicator id and message size for
collectives; communicator, rank, number of ranks and CUDA device for communicator creation. A loader
that can read payloads puts them in the NVTX frame's optional ``payload`` column as a mapping (or its
JSON text) from NCCL's field names ("NCCL communicator ID", "Message size [bytes]", "Rank",
"No. of ranks", "CUDA device") to values.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from analyzer.facts._util import frame_memo, text_matches

#: NVTX domains of libraries and tools, never a user's training step (case-insensitive prefixes)
#: (communication and math libraries; not data-frame libraries such as cuDF, whose per-operation
#: ranges are what a benchmark of them repeats)
INTERNAL_DOMAINS = re.compile(
    r"(?i)^(nccl|rccl|nvshmem|msccl|ucc|ucx|nixl|cudnn|cublas|cufft|cusolver|cusparse|cutensor|"
    r"nvjpeg|cupti)")
#: range texts that are library API calls even in the default domain (old NCCL, RCCL)
INTERNAL_TEXTS = re.compile(r"^(nccl|rccl|nvshmem)[A-Z_:]")


def internal_ranges(nvtx: pd.DataFrame) -> np.ndarray:
    """Per NVTX row: opened by a library (NCCL, NVSHMEM, cuDNN ...), not by the user's code."""
    if nvtx.empty:
        return np.zeros(0, dtype=bool)
    return frame_memo(nvtx, "internal_ranges", lambda: text_matches(nvtx, "domain", INTERNAL_DOMAINS)
                      | text_matches(nvtx, "text", INTERNAL_TEXTS))


def _as_mapping(value: Any) -> Mapping[str, Any] | None:
    if isinstance(value, Mapping):
        return value
    if isinstance(value, str) and value.startswith("{"):
        try:
            out = json.loads(value)
        except (ValueError, RecursionError):  # not JSON, an int of 4,300+ digits, nesting thousands deep
            return None
        return out if isinstance(out, Mapping) else None
    return None


def _field(payload: Mapping[str, Any], *needles: str) -> Any:
    for key, value in payload.items():
        low = str(key).lower()
        if all(n in low for n in needles):
            return value
    return None


def payload_fields(value: Any) -> dict[str, Any]:
    """``{"bytes", "comm", "rank", "nranks", "device"}`` found in one NCCL payload (absent keys left out)."""
    payload = _as_mapping(value)
    if not payload:
        return {}
    out: dict[str, Any] = {}
    for key, needles in (("bytes", ("message size",)), ("comm", ("communicator",)),
                         ("nranks", ("no. of ranks",)), ("device", ("cuda device",))):
        v = _field(payload, *needles)
        if v is not None:
            out[key] = v
    rank = next((v for k, v in payload.items() if str(k).strip().lower() == "rank"), None)
    if rank is not None:
        out["rank"] = rank
    return out


def kernel_payloads(nvtx: pd.DataFrame, kernels: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(message bytes, communicator id) for each kernel row from the NCCL range it was launched in
    (its innermost NVTX range, ``nvtx_id``); ``-1`` / ``""`` when unknown."""
    n = len(kernels)
    nbytes = np.full(n, -1, dtype=np.int64)
    comm = np.full(n, "", dtype=object)
    if n == 0 or nvtx.empty or "payload" not in nvtx.columns or "nvtx_id" not in kernels.columns:
        return nbytes, comm
    ids = kernels["nvtx_id"].fillna(-1).to_numpy(dtype=np.int64)
    index = pd.Index(nvtx["range_id"].to_numpy(dtype=np.int64))
    pos = index.get_indexer(ids)
    payloads = nvtx["payload"].to_numpy(dtype=object)
    cache: dict[int, dict[str, Any]] = {}
    for i, p in enumerate(pos):
        if p < 0:
            continue
        fields = cache.get(p)
        if fields is None:
            fields = cache[p] = payload_fields(payloads[p])
        b = fields.get("bytes")
        if b is not None:
            try:
                nbytes[i] = int(b)
            except (TypeError, ValueError):
                pass
        c = fields.get("comm")
        if c is not None:
            comm[i] = str(c)
    return nbytes, comm


__all__ = ["INTERNAL_DOMAINS", "INTERNAL_TEXTS", "internal_ranges", "kernel_payloads", "payload_fields"]
