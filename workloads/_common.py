"""Shared scaffolding for the workloads: argument parsing, device choice, the NVTX-annotated
warmup/step loop and timing output.

Every workload is ``python -m workloads.<name> [--fixed] [--size smoke|full] [--device ...]
[--steps N] [--warmup N]``. A workload module provides a ``build(cfg) -> step`` function; the
loop here wraps the warmup steps in one ``warmup`` NVTX range and each measured step in a
``step_N`` range (N counts from 0), synchronizes the device after each step and prints the
per-step wall time, then one machine-readable ``RESULT {json}`` line. A training step's usual
``forward`` / ``backward`` / ``optimizer`` ranges come from :func:`train_step` (or its two pieces,
:func:`forward_backward` and :func:`optimizer_step`, for a step with ranges of its own between them). With
``WORKLOADS_RESULT_FILE=PATH`` set (the driver sets it), the same result plus every measured step's
wall time (``step_ms``) is also written to PATH as JSON.

``--bare`` records the program as people record theirs: no NVTX range at all (no ``setup``,
``warmup``, ``step_N`` nor the workload's own ranges) and, under torch.profiler, no schedule and no
``prof.step()``: one ``profile`` around the measured steps, the warm-up steps run before it. The
program still times its steps itself (``step_ms`` in the result), synchronizing after each.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar

from . import _nvtx as nv

if TYPE_CHECKING:
    import torch
    from torch import nn

SIZES = ("smoke", "full")
T = TypeVar("T")
Step = Callable[[int], None]
#: Exit code for "did not fit in GPU memory" (see transformer.py).
EXIT_OOM = 3
#: Where :func:`report` also writes its result with the per-step times (JSON), when set.
ENV_RESULT_FILE = "WORKLOADS_RESULT_FILE"


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Parsed, validated options common to every workload."""

    name: str
    size: str
    fixed: bool
    device: object  # torch.device; kept loose so this module imports without torch
    steps: int
    warmup: int
    options: argparse.Namespace
    has_twin: bool = True
    bare: bool = False

    @property
    def smoke(self) -> bool:
        return self.size == "smoke"

    @property
    def cuda(self) -> bool:
        return getattr(self.device, "type", str(self.device)) == "cuda"

    @property
    def variant(self) -> str:
        if not self.has_twin:
            return "baseline"
        return "fixed" if self.fixed else "pathology"


def make_parser(
    name: str,
    description: str | None,
    *,
    steps: tuple[int, int] = (2, 10),
    warmup: tuple[int, int] = (1, 2),
    has_twin: bool = True,
) -> argparse.ArgumentParser:
    """Parser with the common options. ``steps``/``warmup`` are (smoke, full) defaults."""
    parser = argparse.ArgumentParser(
        prog=f"python -m workloads.{name}",
        description=(description or "").strip().splitlines()[0] if description else None,
    )
    parser.add_argument("--size", choices=SIZES, default="full", help="problem size (default full)")
    twin_help = "run the twin that fixes the pathology" if has_twin else "no twin: accepted, no-op"
    parser.add_argument("--fixed", action="store_true", help=twin_help)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--steps", type=int, default=None,
                        help=f"measured steps (default {steps[0]} smoke / {steps[1]} full)")
    parser.add_argument("--warmup", type=int, default=None,
                        help=f"warmup steps (default {warmup[0]} smoke / {warmup[1]} full)")
    parser.add_argument("--bare", action="store_true",
                        help="no NVTX ranges; under torch.profiler one profile around the "
                             "measured steps, no schedule or ProfilerStep markers")
    parser.set_defaults(_defaults={"steps": steps, "warmup": warmup, "has_twin": has_twin})
    return parser


def select_device(choice: str) -> object:
    """``auto`` picks CUDA when available. Asking for ``cuda`` without a GPU exits with code 2."""
    import torch

    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda requested but torch.cuda.is_available() is False")
    return torch.device(choice)


def parse_config(name: str, parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> RunConfig:
    """Parse ``argv`` and resolve size-dependent defaults and the device."""
    ns = parser.parse_args(argv)
    defaults = ns._defaults
    idx = SIZES.index(ns.size)
    steps = ns.steps if ns.steps is not None else defaults["steps"][idx]
    warmup = ns.warmup if ns.warmup is not None else defaults["warmup"][idx]
    if steps < 1 or warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")
    if ns.bare:
        nv.disable()  # before build(): the workload's own ranges go too
    return RunConfig(name=name, size=ns.size, fixed=ns.fixed, device=select_device(ns.device),
                     steps=steps, warmup=warmup, options=ns, has_twin=defaults["has_twin"],
                     bare=ns.bare)


def synchronize(device: object) -> None:
    """Wait for all queued work on ``device`` (no-op on CPU)."""
    if getattr(device, "type", None) == "cuda":
        import torch

        torch.cuda.synchronize(device)


def run_steps(cfg: RunConfig, step: Step, *, label: str = "step") -> list[float]:
    """Run ``cfg.warmup`` steps in a ``warmup`` range, then ``cfg.steps`` steps each in a
    ``{label}_N`` range. Returns measured step times in milliseconds.

    With ``WORKLOADS_TORCH_TRACE_DIR`` set, torch.profiler records the measured steps (one
    ``ProfilerStep#N`` each; the warmup steps are the profiler's warmup): see ``_torchprof``.
    With ``cfg.bare`` (no ranges) the warm-up runs first and one unscheduled profile records the
    measured steps, as a user wraps a loop in ``with torch.profiler.profile(...)``."""
    from . import _torchprof

    if cfg.bare:
        _warm_up(cfg, step)
        with _torchprof.recording(0, cfg.steps, cfg.cuda, scheduled=False) as profiler_step:
            return _measure(cfg, step, label, profiler_step)
    with _torchprof.recording(cfg.warmup, cfg.steps, cfg.cuda) as profiler_step:
        _warm_up(cfg, step)
        for _ in range(cfg.warmup):
            profiler_step()
        return _measure(cfg, step, label, profiler_step)


def _warm_up(cfg: RunConfig, step: Step) -> None:
    if cfg.warmup:
        with nv.range("warmup"):
            for i in range(cfg.warmup):
                step(-1 - i)
            synchronize(cfg.device)


def _measure(cfg: RunConfig, step: Step, label: str, profiler_step: Callable[[], None]) -> list[float]:
    """The measured steps, each timed by the program (synchronized) in a ``{label}_N`` range."""
    times: list[float] = []
    for i in range(cfg.steps):
        t0 = time.perf_counter()
        with nv.range(f"{label}_{i}"):
            step(i)
            synchronize(cfg.device)
        ms = (time.perf_counter() - t0) * 1e3
        profiler_step()
        times.append(ms)
        print(f"[{cfg.name}] {label} {i}: {ms:.3f} ms", flush=True)
    return times


def report(cfg: RunConfig, times: list[float], **extra: object) -> None:
    """Print the per-run summary and one ``RESULT {json}`` line."""
    result = {
        "workload": cfg.name, "variant": cfg.variant, "size": cfg.size, "device": str(cfg.device),
        "steps": len(times), "warmup": cfg.warmup, "nvtx": nv.BACKEND, "bare": cfg.bare,
        "mean_ms": round(statistics.fmean(times), 3) if times else None,
        "median_ms": round(statistics.median(times), 3) if times else None,
        **extra,
    }
    # each line in one write: ranks of a torchrun job share the launcher's stdout, and print()'s
    # separate write of the newline let another rank's line land inside this one
    _line(f"[{cfg.name}] {cfg.variant}: mean {result['mean_ms']} ms/step over {len(times)} steps")
    _line("RESULT " + json.dumps(result))
    path = os.environ.get(ENV_RESULT_FILE)
    if path:
        with open(path, "w") as fh:
            json.dump({**result, "step_ms": [round(t, 3) for t in times]}, fh)


def _line(text: str) -> None:
    sys.stdout.flush()
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def run_workload(
    name: str,
    description: str | None,
    build: Callable[[RunConfig], Step],
    argv: Sequence[str] | None = None,
    *,
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    steps: tuple[int, int] = (2, 10),
    warmup: tuple[int, int] = (1, 2),
    has_twin: bool = True,
    label: str = "step",
) -> int:
    """Entry point shared by the pathology modules: parse, build inside a ``setup`` range, loop."""
    parser = make_parser(name, description, steps=steps, warmup=warmup, has_twin=has_twin)
    if add_arguments is not None:
        add_arguments(parser)
    cfg = parse_config(name, parser, argv)
    print(f"[{name}] variant={cfg.variant} size={cfg.size} device={cfg.device} "
          f"warmup={cfg.warmup} steps={cfg.steps} nvtx={nv.BACKEND}", flush=True)
    with nv.range("setup"):
        step = build(cfg)
        synchronize(cfg.device)
    times = run_steps(cfg, step, label=label)
    report(cfg, times)
    return 0


def pick(cfg: RunConfig, smoke: T, full: T) -> T:
    """Return the smoke or the full value of a size parameter."""
    return smoke if cfg.smoke else full


def add_backend_argument(parser: argparse.ArgumentParser) -> None:
    """``--backend`` of the torch.compile workloads (resolved by :func:`compile_backend`)."""
    parser.add_argument("--backend", default=None,
                        help="torch.compile backend (default inductor on a GPU, eager on a CPU)")


def compile_backend(cfg: RunConfig) -> str:
    """The torch.compile backend: ``--backend``, else inductor on a GPU and eager (Dynamo only: no
    Triton, no CUDA graphs) on a CPU, so the compiled workloads stay testable without a GPU."""
    return cfg.options.backend or ("inductor" if cfg.cuda else "eager")


def mlp_stack(blocks: int, width: int, classes: int) -> nn.Sequential:
    """The Linear(width, width) + LayerNorm + GELU stack of ``blocks`` blocks and a
    Linear(width, classes) head (an ``nn.Sequential`` on the CPU; the caller moves it), shared by
    the MLP workloads (ema_clip_loop, snapshot_to_host, optimizer_loop, ...). Its parameters come
    from torch's global generator in module order: seed it first for repeatable weights."""
    from torch import nn

    layers: list[nn.Module] = []
    for _ in range(blocks):
        layers += [nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, classes))


@dataclasses.dataclass(frozen=True)
class MlpTraining:
    """What :func:`mlp_training` sets up: the model, its optimizer, the autocast and one batch."""

    model: nn.Sequential
    opt: torch.optim.Optimizer
    amp: AbstractContextManager[Any]
    x: torch.Tensor
    y: torch.Tensor


def mlp_training(cfg: RunConfig, blocks: int, width: int, rows: int, classes: int) -> MlpTraining:
    """The set-up of the MLP classifiers trained on one fixed batch (checkpoint_everything,
    detect_anomaly, layer_timing_sync, snapshot_to_host): torch's generator seeded with 0, the
    :func:`mlp_stack` on the device, AdamW (lr 1e-4, fused on a GPU), bf16 autocast, then ``rows``
    random inputs of ``width`` and their labels drawn on the device, in that order."""
    import torch

    dev = cfg.device
    torch.manual_seed(0)
    model = mlp_stack(blocks, width, classes).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cfg.cuda)
    amp = bf16_autocast(cfg)
    x = torch.randn(rows, width, device=dev)
    y = torch.randint(0, classes, (rows,), device=dev)
    return MlpTraining(model=model, opt=opt, amp=amp, x=x, y=y)


def text_encoder(layers: int, width: int, heads: int, vocab: int, classes: int) -> nn.Module:
    """A BERT-style text classifier (token embedding, ``layers`` pre-norm blocks of fused-QKV
    attention with ``scaled_dot_product_attention`` and a GELU MLP of 4 x ``width``, a final
    LayerNorm, mean pooling and a Linear head; on the CPU, the caller moves it), shared by the
    workloads on token batches (compile_varlen, unfrozen_backbone). ``model.backbone`` is everything
    but ``model.head``. Called on ``(batch, length)`` token ids, returns ``(batch, classes)``
    logits. Seed torch's global generator first for repeatable weights."""
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):  # type: ignore[no-untyped-def]
            b, t, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, width)
            x = x + self.proj(a)
            return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))

    class Backbone(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.LayerNorm(width)

        def forward(self, ids):  # type: ignore[no-untyped-def]
            x = self.embed(ids)
            for block in self.blocks:
                x = block(x)
            return self.norm(x).mean(dim=1)

    class Classifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone, self.head = Backbone(), nn.Linear(width, classes)

        def forward(self, ids):  # type: ignore[no-untyped-def]
            return self.head(self.backbone(ids))

    return Classifier()


def bf16_autocast(cfg: RunConfig) -> AbstractContextManager[Any]:
    """bf16 autocast on a GPU, switched off on a CPU (smoke runs stay exact); reusable, so one per
    program is entered by every step."""
    import torch

    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=cfg.cuda)


def forward_backward(opt: Any, loss: Callable[..., torch.Tensor], *args: Any,
                     amp: AbstractContextManager[Any] | None = None, zero_grad: bool = True) -> torch.Tensor:
    """A training step's first two ranges: ``forward`` (``opt.zero_grad(set_to_none=True)`` first when
    ``zero_grad``, then ``loss(*args)`` under ``amp``) and ``backward`` (its ``backward()``). Returns the
    loss, for a caller that keeps it (the step's own variable would have)."""
    with nv.range("forward"):
        if zero_grad:
            opt.zero_grad(set_to_none=True)
        with amp if amp is not None else nullcontext():
            value = loss(*args)
    with nv.range("backward"):
        value.backward()
    return value


def optimizer_step(opt: Any, *, zero_grad: bool = False, name: str = "optimizer") -> None:
    """A training step's optimizer range: ``opt.step()``, then ``opt.zero_grad(set_to_none=True)`` when
    ``zero_grad`` (for the programs that clear the gradients at the end of a step, not the start)."""
    with nv.range(name):
        opt.step()
        if zero_grad:
            opt.zero_grad(set_to_none=True)


def train_step(opt: Any, loss: Callable[..., torch.Tensor], *,
               batch: Callable[[int], tuple[Any, ...]] | None = None,
               amp: AbstractContextManager[Any] | None = None, zero_grad_last: bool = False) -> Step:
    """The usual training step, shared by the training workloads: ``batch(i)`` (the step's inputs, made
    before the ranges; none when omitted), then :func:`forward_backward` with them (``loss(*batch(i))``
    under ``amp``) and :func:`optimizer_step`. The gradients are cleared at the start of ``forward``, or
    with ``zero_grad_last`` after ``opt.step()`` in ``optimizer``."""

    def step(i: int) -> None:
        args = batch(i) if batch is not None else ()
        value = forward_backward(opt, loss, *args, amp=amp, zero_grad=not zero_grad_last)
        optimizer_step(opt, zero_grad=zero_grad_last)
        del value  # the loss lives to the step's end, as the programs' own ``loss`` did

    return step
