"""conv_layouts: a microbenchmark of ATen's slow fallback convolution kernels against the layout or
backend that replaces them (the measured table behind the rule slow-fallback-kernels).

Not a held-out program: each case times one convolution op, forward and backward separately, with
CUDA events, on the fallback path and on its fix, at several shapes and dtypes:

* ``conv_depthwise2d``: a depthwise 2-d convolution on NCHW tensors runs ATen's own
  ``conv_depthwise2d_forward_kernel`` / ``_backward_kernel`` / ``_grad_weight_kernel``; the same op on
  ``torch.channels_last`` tensors runs cuDNN's NHWC kernels;
* ``conv_depthwise3d``: ``conv_depthwise3d_cuda_*`` on NCDHW against ``torch.channels_last_3d``;
* ``slow_conv2d``, ``slow_conv_dilated2d``, ``slow_conv_transpose2d`` (``im2col_kernel`` /
  ``col2im_kernel`` plus GEMMs) and ``slow_conv3d`` (``vol2col_kernel`` / ``col2vol_kernel``): the
  unfused convolutions ATen runs when cuDNN is not used (``torch.backends.cudnn.enabled = False``),
  against the same op through cuDNN.

Each variant is also run once under torch.profiler, so the table says which kernels each side ran
(the fallback kernels must appear on the slow side only) and which share of the slow side's GPU time
they took (``fallback_share``: for im2col the GEMMs between the copies are the rest).
Output: a JSON table (GPU, torch, cuDNN, date, one row per case and direction with the median
milliseconds of each side, ``speedup`` = slow / fixed and the kernels). On a GPU machine::

    python3 workloads/conv_layouts.py --out $OUT/conv_layouts.json

``--quick`` runs two small shapes per case (a smoke test, also on CPU).
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

FALLBACK_MARKS = ("conv_depthwise2d", "conv_depthwise3d", "im2col", "col2im", "vol2col", "col2vol",
                  "slow_conv")

# family: (ndim, fix, shapes). 2-d shapes: (N, C_in, H, W, C_out, kernel); 3-d: (N, C_in, D, H, W, C_out, k)
CASES: dict[str, dict[str, Any]] = {
    "conv_depthwise2d": {
        "fix": "channels_last", "dtypes": ("bf16", "fp16", "fp32"),
        "shapes": [(64, 128, 56, 56, 128, 7), (64, 256, 28, 28, 256, 7), (64, 512, 14, 14, 512, 7),
                   (32, 96, 112, 112, 96, 3), (64, 384, 14, 14, 384, 3), (16, 64, 128, 128, 64, 5)],
        "quick": [(2, 16, 32, 32, 16, 7), (2, 32, 16, 16, 32, 3)],
    },
    "conv_depthwise3d": {
        "fix": "channels_last_3d", "dtypes": ("bf16", "fp32"),
        "shapes": [(8, 64, 16, 56, 56, 64, 3), (8, 128, 8, 28, 28, 128, 3), (4, 192, 8, 28, 28, 192, 5)],
        "quick": [(1, 8, 4, 8, 8, 8, 3)],
    },
    "slow_conv2d": {
        "fix": "cudnn", "dtypes": ("bf16", "fp32"),
        "shapes": [(32, 64, 56, 56, 64, 3), (32, 128, 28, 28, 128, 3), (32, 256, 14, 14, 256, 3),
                   (16, 3, 224, 224, 64, 7)],
        "quick": [(2, 8, 16, 16, 8, 3)],
    },
    "slow_conv_dilated2d": {
        "fix": "cudnn", "dtypes": ("bf16", "fp32"),
        "shapes": [(16, 64, 56, 56, 64, 3), (16, 256, 28, 28, 256, 3)],
        "quick": [(2, 8, 16, 16, 8, 3)],
    },
    "slow_conv_transpose2d": {
        "fix": "cudnn", "dtypes": ("bf16", "fp32"),
        "shapes": [(16, 128, 28, 28, 64, 4), (16, 256, 14, 14, 128, 4)],
        "quick": [(2, 8, 8, 8, 8, 4)],
    },
    "slow_conv3d": {
        "fix": "cudnn", "dtypes": ("bf16", "fp32"),
        "shapes": [(4, 32, 16, 56, 56, 32, 3), (4, 64, 8, 28, 28, 64, 3)],
        "quick": [(1, 4, 4, 8, 8, 4, 3)],
    },
}


def _dtype(torch: Any, name: str) -> Any:
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def build(torch: Any, family: str, shape: tuple[int, ...], dtype: str, device: str, fixed: bool
          ) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(forward, backward) closures for one variant; backward reuses one retained graph."""
    import torch.nn.functional as F

    dt = _dtype(torch, dtype)
    g = torch.Generator(device="cpu").manual_seed(0)
    if family == "conv_depthwise3d" or family == "slow_conv3d":
        n, cin, d, h, w, cout, k = shape
        x = torch.randn(n, cin, d, h, w, generator=g)
    else:
        n, cin, h, w, cout, k = shape
        x = torch.randn(n, cin, h, w, generator=g)
    depthwise = family.startswith("conv_depthwise")
    groups = cin if depthwise else 1
    kwargs: dict[str, Any] = {}
    if family == "conv_depthwise2d" or family == "conv_depthwise3d":
        wt = torch.randn(cout, 1, *([k] * (x.dim() - 2)), generator=g)
        kwargs = {"padding": k // 2, "groups": groups}
        op = F.conv2d if x.dim() == 4 else F.conv3d
    elif family == "slow_conv2d":
        wt = torch.randn(cout, cin, k, k, generator=g)
        kwargs = {"padding": k // 2, "stride": 2 if k == 7 else 1}
        op = F.conv2d
    elif family == "slow_conv_dilated2d":
        wt = torch.randn(cout, cin, k, k, generator=g)
        kwargs = {"padding": 2, "dilation": 2}
        op = F.conv2d
    elif family == "slow_conv_transpose2d":
        wt = torch.randn(cin, cout, k, k, generator=g)
        kwargs = {"padding": 1, "stride": 2}
        op = F.conv_transpose2d
    elif family == "slow_conv3d":
        wt = torch.randn(cout, cin, k, k, k, generator=g)
        kwargs = {"padding": k // 2}
        op = F.conv3d
    else:
        raise ValueError(family)
    x = (x * 0.1).to(device=device, dtype=dt)
    wt = (wt * 0.1).to(device=device, dtype=dt)
    fix = CASES[family]["fix"]
    if fixed and fix == "channels_last":
        x, wt = x.contiguous(memory_format=torch.channels_last), wt.contiguous(memory_format=torch.channels_last)
    elif fixed and fix == "channels_last_3d":
        x = x.contiguous(memory_format=torch.channels_last_3d)
        wt = wt.contiguous(memory_format=torch.channels_last_3d)
    x.requires_grad_(True)
    wt.requires_grad_(True)
    use_cudnn = not (fix == "cudnn" and not fixed)

    # cudnn.enabled is set in each closure (not with cudnn.flags(), which resets TF32 and other flags)
    def forward() -> Any:
        torch.backends.cudnn.enabled = use_cudnn
        with torch.no_grad():
            return op(x, wt, **kwargs)

    torch.backends.cudnn.enabled = use_cudnn
    out = op(x, wt, **kwargs)
    grad = torch.randn_like(out)

    def backward() -> Any:
        torch.backends.cudnn.enabled = use_cudnn
        return torch.autograd.grad(out, (x, wt), grad, retain_graph=True)

    return forward, backward


def time_ms(torch: Any, fn: Callable[[], Any], device: str, reps: int, rounds: int) -> float:
    """Median over ``rounds`` of the mean time of ``reps`` back-to-back calls (CUDA events)."""
    for _ in range(3):
        fn()
    samples = []
    for _ in range(rounds):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / reps)
        else:
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            samples.append((time.perf_counter() - t0) * 1e3 / reps)
    return statistics.median(samples)


def kernels(torch: Any, fn: Callable[[], Any], device: str, reps: int = 3) -> dict[str, float]:
    """GPU kernel name -> total microseconds over ``reps`` calls, from torch.profiler ({} on CPU or failure)."""
    if device != "cuda":
        return {}
    from torch.profiler import ProfilerActivity, profile
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                fn()
            torch.cuda.synchronize()
        out: dict[str, float] = {}
        for ev in prof.events():
            kind = str(getattr(ev, "device_type", ""))
            if "CUDA" not in kind:
                continue
            us = getattr(ev, "device_time_total", None)
            if us is None:
                us = getattr(ev, "cuda_time_total", 0.0)
            out[ev.name] = out.get(ev.name, 0.0) + float(us or 0.0)
        return {k: round(v / reps, 2) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}
    except Exception as exc:  # the timing is the point; a profiler failure only loses the kernel list
        print(f"profiler failed: {exc!r}", file=sys.stderr)
        return {}


def is_fallback(name: str) -> bool:
    low = name.lower()
    return any(m in low for m in FALLBACK_MARKS)


def run(quick: bool, families: list[str], reps: int, rounds: int) -> dict[str, Any]:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    flags = {"cudnn.benchmark": torch.backends.cudnn.benchmark,
             "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
             "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
             "cudnn.depthwise_kernel": str(getattr(torch.backends.cudnn, "depthwise_kernel", None))}
    rows = []
    for family in families:
        case = CASES[family]
        for dtype in case["dtypes"]:
            if device == "cpu" and dtype != "fp32":
                continue
            for shape in case["quick" if quick else "shapes"]:
                sides: dict[bool, tuple[Callable[[], Any], Callable[[], Any]]] = {}
                try:
                    for fixed in (False, True):
                        sides[fixed] = build(torch, family, shape, dtype, device, fixed)
                except Exception as exc:  # one unsupported combination must not lose the table
                    print(f"{family} {dtype} {shape}: {exc!r}", file=sys.stderr)
                    torch.backends.cudnn.enabled = True
                    continue
                for direction, idx in (("forward", 0), ("backward", 1)):
                    row: dict[str, Any] = {"family": family, "fix": case["fix"], "dtype": dtype,
                                           "shape": list(shape), "direction": direction}
                    try:
                        slow = time_ms(torch, sides[False][idx], device, reps, rounds)
                        fast = time_ms(torch, sides[True][idx], device, reps, rounds)
                        # second pass, interleaved, so a clock change between the two does not bias one side
                        slow = min(slow, time_ms(torch, sides[False][idx], device, reps, rounds))
                        fast = min(fast, time_ms(torch, sides[True][idx], device, reps, rounds))
                    except Exception as exc:
                        print(f"{family} {dtype} {shape} {direction}: {exc!r}", file=sys.stderr)
                        torch.backends.cudnn.enabled = True
                        continue
                    k_slow = kernels(torch, sides[False][idx], device)
                    k_fast = kernels(torch, sides[True][idx], device)
                    fb_slow = sum(v for k, v in k_slow.items() if is_fallback(k))
                    fb_fast = sum(v for k, v in k_fast.items() if is_fallback(k))
                    tot_slow = sum(k_slow.values())
                    row.update({
                        "slow_ms": round(slow, 4), "fixed_ms": round(fast, 4),
                        "speedup": round(slow / fast, 3) if fast > 0 else None,
                        "fallback_share": round(fb_slow / tot_slow, 3) if tot_slow > 0 else None,
                        "fallback_on_slow": fb_slow > 0, "fallback_on_fixed": fb_fast > 0,
                        "slow_kernels": dict(list(k_slow.items())[:6]),
                        "fixed_kernels": dict(list(k_fast.items())[:6]),
                    })
                    rows.append(row)
                    print(f"{family:22s} {dtype:5s} {direction:8s} {str(shape):32s} slow {slow:8.3f} ms "
                          f"fixed {fast:8.3f} ms  x{row['speedup']}  share {row['fallback_share']}", flush=True)
                del sides
                if device == "cuda":
                    torch.cuda.empty_cache()
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    return {
        "benchmark": "workloads/conv_layouts.py",
        "gpu": gpu,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if device == "cuda" else None,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "method": (f"CUDA events, median of {rounds} rounds of {reps} back-to-back calls, min of two "
                   "passes; torch's default flags (below); kernels from torch.profiler"),
        "flags": flags,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the JSON table here (default: stdout)")
    ap.add_argument("--quick", action="store_true", help="two small shapes per case (smoke test)")
    ap.add_argument("--family", action="append", choices=sorted(CASES), help="only these families")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    table = run(args.quick, args.family or list(CASES), args.reps, args.rounds)
    text = json.dumps(table, indent=1)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
