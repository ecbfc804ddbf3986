"""The GPU facts table (``gpus.yaml``, package data) behind a typed accessor.

    >>> from analyzer.hardware import lookup_gpu
    >>> spec = lookup_gpu("Tesla T4")
    >>> spec.pcie.generation, round(spec.pinned_copy_gbs, 1), spec.peak_flops("fp16_tensor")
    (3, 12.6, 65000000000000.0)

Names are matched the way traces report them (CUDA's device name, as nsys, ncu and Kineto record it),
ignoring case, punctuation, the ``NVIDIA``/``Tesla``/``GeForce`` prefixes and a MIG profile suffix.
Units on the dataclasses: GB/s (1e9 bytes/s) and TFLOP/s as in the datasheets; the helpers
``memory_bandwidth``, ``pinned_copy_bandwidth`` ... return bytes/s and ``peak_flops`` FLOP/s.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

#: precision keys of ``peak_tflops`` (dense, no sparsity)
PRECISIONS: tuple[str, ...] = (
    "fp64", "fp64_tensor", "fp32", "tf32_tensor", "fp16_tensor", "bf16_tensor", "fp8_tensor", "int8_tensor",
)
#: PCIe per-lane rate after line encoding, GB/s per direction (gen1/2: 8b/10b; gen3-5: 128b/130b)
PCIE_LANE_GBS: dict[int, float] = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.877}
#: share of the link's per-direction rate a large pinned copy reaches when no measurement is tabled
#: (measured 0.86-0.88 on PCIe 5 x16; about 0.8 is what PCIe 3/4 hosts usually show)
PINNED_LINK_EFFICIENCY = 0.8

_PREFIXES = re.compile(r"^(?:nvidia\s+)?(?:tesla\s+|geforce\s+)?")
_MIG = re.compile(r"\s+mig\s+\d+g\.\d+gb.*$")


class GpuTableError(ValueError):
    """The packaged GPU table is malformed (a build error, never user input)."""


@dataclass(frozen=True)
class PcieLink:
    generation: int
    width: int

    @property
    def gbs(self) -> float:
        """Theoretical rate per direction, GB/s."""
        return PCIE_LANE_GBS.get(self.generation, 0.0) * self.width

    def label(self) -> str:
        return f"PCIe {self.generation} x{self.width}"


@dataclass(frozen=True)
class NvLink:
    generation: int
    bidirectional_gbs: float  # the datasheet's total over all links, both directions added
    bridge: bool = False  # a 2/4-GPU bridge rather than an NVSwitch fabric

    @property
    def gbs(self) -> float:
        """Per direction, GB/s (what nccl-tests' bus bandwidth compares with)."""
        return self.bidirectional_gbs / 2

    def label(self) -> str:
        kind = "bridge" if self.bridge else "NVLink"
        return f"NVLink {self.generation} ({self.bidirectional_gbs:g} GB/s bidirectional{', ' + kind if self.bridge else ''})"


@dataclass(frozen=True)
class GpuSpec:
    """One row of the GPU table."""

    key: str
    name: str
    match: tuple[str, ...]
    architecture: str
    compute_capability: str
    sm_count: int
    memory_gb: float
    memory_bandwidth_gbs: float
    l2_mb: float | None
    pcie: PcieLink
    pinned_copy_gbs: float
    pinned_copy_basis: str  # how pinned_copy_gbs was obtained (documentation)
    nvlink: NvLink | None
    peak_tflops: Mapping[str, float]
    sources: tuple[str, ...]
    notes: str = ""
    derived: tuple[str, ...] = field(default=())

    # -- in SI units ---------------------------------------------------------------------------------
    @property
    def memory_bandwidth(self) -> float:
        """bytes/s"""
        return self.memory_bandwidth_gbs * 1e9

    @property
    def pinned_copy_bandwidth(self) -> float:
        """bytes/s, one direction"""
        return self.pinned_copy_gbs * 1e9

    @property
    def pcie_bandwidth(self) -> float:
        """bytes/s per direction (theoretical)"""
        return self.pcie.gbs * 1e9

    @property
    def nvlink_bandwidth(self) -> float | None:
        """bytes/s per direction over all links (None: no NVLink)"""
        return self.nvlink.gbs * 1e9 if self.nvlink else None

    @property
    def l2_bytes(self) -> int | None:
        return int(self.l2_mb * 1024 * 1024) if self.l2_mb else None

    def peak_flops(self, precision: str) -> float | None:
        """Dense peak FLOP/s (OP/s for int8) of ``precision`` (see :data:`PRECISIONS`), None when the GPU
        has no such path or the datasheet does not give it."""
        if precision not in PRECISIONS:
            raise KeyError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
        value = self.peak_tflops.get(precision)
        return value * 1e12 if value is not None else None

    def label(self) -> str:
        """How a finding names the table row it used (``NVIDIA T4``)."""
        return self.name

    @property
    def pinned_copy_note(self) -> str:
        """Short provenance of ``pinned_copy_gbs`` for a message: ``80% of the link's 15.8 GB/s`` or
        ``as measured on this GPU model``."""
        if self.pinned_copy_basis.startswith("derived"):
            return f"{PINNED_LINK_EFFICIENCY:.0%} of the link's {self.pcie.gbs:.1f} GB/s"
        return "as measured on this GPU model"


def normalize_gpu_name(name: str) -> str:
    """The matching key of a reported GPU name: lower case, no vendor/brand prefix, no MIG suffix,
    punctuation as single spaces (``"NVIDIA A100-SXM4-40GB"`` -> ``"a100 sxm4 40gb"``)."""
    text = " ".join(str(name).lower().replace("-", " ").replace("_", " ").split())
    text = _MIG.sub("", text)
    text = _PREFIXES.sub("", text)
    text = re.sub(r"[^a-z0-9.]+", " ", text)
    return " ".join(text.split())


def is_mig(name: str) -> bool:
    """True for a MIG slice's name (``NVIDIA A100-SXM4-40GB MIG 1g.5gb``)."""
    return _MIG.search(" ".join(str(name).lower().split())) is not None


@functools.lru_cache(maxsize=1)
def gpu_table() -> tuple[GpuSpec, ...]:
    """Every row of the packaged table, in file order."""
    text = resources.files("analyzer.hardware").joinpath("gpus.yaml").read_text(encoding="utf-8")
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: 10x faster
    rows = data.get("gpus") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise GpuTableError("gpus.yaml: no 'gpus' list")
    specs = tuple(_spec(row) for row in rows)
    seen: dict[str, str] = {}
    for spec in specs:
        for alias in (spec.name, *spec.match):
            norm = normalize_gpu_name(alias)
            if seen.get(norm, spec.key) != spec.key:
                raise GpuTableError(f"gpus.yaml: name {alias!r} matches both {seen[norm]} and {spec.key}")
            seen[norm] = spec.key
    return specs


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, GpuSpec]:
    return {normalize_gpu_name(alias): spec for spec in gpu_table() for alias in (spec.name, *spec.match)}


def lookup_gpu(name: str | None) -> GpuSpec | None:
    """The table row for a GPU name as a trace reports it, None when the GPU is not in the table."""
    if not name:
        return None
    return _index().get(normalize_gpu_name(name))


def gpu_by_key(key: str) -> GpuSpec:
    for spec in gpu_table():
        if spec.key == key:
            return spec
    raise KeyError(f"no GPU {key!r} in the table; known: {', '.join(s.key for s in gpu_table())}")


def _spec(row: Any) -> GpuSpec:
    if not isinstance(row, dict):
        raise GpuTableError(f"gpus.yaml: a row is not a mapping: {row!r}")
    key = str(row.get("key", "?"))
    try:
        pcie = PcieLink(int(row["pcie"]["generation"]), int(row["pcie"]["width"]))
        nv = row.get("nvlink")
        nvlink = NvLink(int(nv["generation"]), float(nv["bidirectional_gbs"]), bool(nv.get("bridge", False))) \
            if nv else None
        peaks = {str(k): float(v) for k, v in (row.get("peak_tflops") or {}).items()}
        unknown = set(peaks) - set(PRECISIONS)
        if unknown:
            raise GpuTableError(f"gpus.yaml {key}: unknown precisions {sorted(unknown)}")
        if row.get("pinned_copy_gbs") is not None:
            pinned = float(row["pinned_copy_gbs"])
            basis = " ".join(str(row.get("pinned_copy_basis") or "measured").split())
        else:
            pinned = round(PINNED_LINK_EFFICIENCY * pcie.gbs, 1)
            basis = (f"derived: {PINNED_LINK_EFFICIENCY:.0%} of {pcie.label()}'s {pcie.gbs:.1f} GB/s per "
                     "direction")
        sources = tuple(str(s) for s in row.get("sources") or ())
        if not sources:
            raise GpuTableError(f"gpus.yaml {key}: every row cites its sources")
        return GpuSpec(
            key=key,
            name=str(row["name"]),
            match=tuple(str(m) for m in row.get("match") or ()),
            architecture=str(row["architecture"]),
            compute_capability=str(row["compute_capability"]),
            sm_count=int(row["sm_count"]),
            memory_gb=float(row["memory_gb"]),
            memory_bandwidth_gbs=float(row["memory_bandwidth_gbs"]),
            l2_mb=float(row["l2_mb"]) if row.get("l2_mb") is not None else None,
            pcie=pcie,
            pinned_copy_gbs=pinned,
            pinned_copy_basis=basis,
            nvlink=nvlink,
            peak_tflops=peaks,
            sources=sources,
            notes=" ".join(str(row.get("notes") or "").split()),
            derived=tuple(str(d) for d in row.get("derived") or ()),
        )
    except (KeyError, TypeError, ValueError) as err:
        if isinstance(err, GpuTableError):
            raise
        raise GpuTableError(f"gpus.yaml {key}: {type(err).__name__}: {err}") from None
