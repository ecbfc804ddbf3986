"""Shared scaffolding of the multi-GPU workloads (DDP / FSDP), on top of ``_common``.

A distributed workload runs one process per GPU under ``torchrun`` (which sets ``RANK``,
``WORLD_SIZE`` and ``LOCAL_RANK``), or alone: then it is the 1-GPU run of a strong-scaling pair,
with no process group and the same *global* batch, so the two runs do the same work in total.
The backend is NCCL on CUDA and gloo on CPU (the smoke tests: ``torchrun --standalone
--nproc_per_node=2 -m workloads.ddp_straggler --size smoke --device cpu``).

Every rank runs ``_common.run_steps`` (the ``warmup`` and ``step_N`` NVTX ranges) with phase
ranges inside each step: ``load_batch``, ``forward``, ``backward``, ``allreduce_grads`` (only
where the program all-reduces by hand) and ``optimizer_step``. NCCL adds its own NVTX ranges
(domain ``NCCL``, with message sizes in their payloads) when it is new enough.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from . import _common as c
from . import _nvtx as nv
from ._distributed import NCCL_ENV_DEFAULTS


@dataclasses.dataclass(frozen=True)
class Dist:
    """Where this process sits in the job."""

    rank: int
    world: int
    local_rank: int
    backend: str | None  # None: launched alone, no process group
    owns_group: bool = True  # False: the group was there already (a harness); leave it be

    @property
    def distributed(self) -> bool:
        return self.backend is not None

    @property
    def last(self) -> int:
        return self.world - 1


def launched_by_torchrun(env: dict[str, str] | os._Environ[str] | None = None) -> bool:
    env = os.environ if env is None else env
    return "RANK" in env and "WORLD_SIZE" in env


def init(cfg: c.RunConfig) -> tuple[c.RunConfig, Dist]:
    """Join the process group when launched by torchrun; pin this rank's GPU.

    Returns the config with ``device`` set to this rank's device (``cuda:LOCAL_RANK``)."""
    import torch

    for key, value in NCCL_ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    if not launched_by_torchrun():
        return cfg, Dist(rank=0, world=1, local_rank=0, backend=None)
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if dist.is_initialized():  # called from a harness that set the group up
        backend = str(dist.get_backend())
        device = torch.device("cuda", local_rank) if cfg.cuda else torch.device("cpu")
        if cfg.cuda:
            torch.cuda.set_device(device)
        return (dataclasses.replace(cfg, device=device),
                Dist(dist.get_rank(), dist.get_world_size(), local_rank, backend, False))
    if cfg.cuda:
        if local_rank >= torch.cuda.device_count():
            raise SystemExit(f"error: LOCAL_RANK {local_rank} but only "
                             f"{torch.cuda.device_count()} GPUs are visible")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        # device_id: NCCL communicators are created now (eagerly), inside the `setup` range.
        dist.init_process_group("nccl", device_id=device, timeout=_dt.timedelta(seconds=180))
        backend = "nccl"
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=_dt.timedelta(seconds=180))
        backend = "gloo"
    return dataclasses.replace(cfg, device=device), Dist(rank, world, local_rank, backend)


def shutdown(d: Dist, *, clean: bool = True) -> None:
    """Leave the job: a barrier first when every rank got here (``clean``), none after an error
    (the other ranks may never arrive)."""
    if d.distributed:
        import torch.distributed as dist

        if clean:
            dist.barrier()
        if d.owns_group:
            dist.destroy_process_group()


def per_rank(d: Dist, global_n: int) -> int:
    """This rank's share of a global batch (strong scaling: the global batch is fixed)."""
    if global_n % d.world:
        raise SystemExit(f"error: global batch {global_n} does not split over {d.world} ranks")
    return global_n // d.world


def mlp(d_in: int, width: int, depth: int, d_out: int) -> Any:
    """``d_in -> width``, ``depth`` x (GELU, ``width -> width``), GELU, ``width -> d_out``."""
    import torch

    layers: list[torch.nn.Module] = [torch.nn.Linear(d_in, width)]
    for _ in range(depth):
        layers += [torch.nn.GELU(), torch.nn.Linear(width, width)]
    layers += [torch.nn.GELU(), torch.nn.Linear(width, d_out)]
    return torch.nn.Sequential(*layers)


def device_batches(cfg: c.RunConfig, d: Dist, rows: int, d_in: int, d_out: int,
                   pool: int = 4) -> Iterator[tuple[Any, Any]]:
    """Endless (x, target) pairs already on the device: a small pool generated once per rank,
    cycled, so that loading costs nothing and every rank does the same work."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(1234 + d.rank)
    data = [(torch.randn(rows, d_in, generator=gen).to(cfg.device),
             torch.randn(rows, d_out, generator=gen).to(cfg.device)) for _ in range(pool)]
    i = 0
    while True:
        yield data[i % pool]
        i += 1


def wrap_ddp(model: Any, cfg: c.RunConfig, d: Dist, **kwargs: Any) -> Any:
    """``DistributedDataParallel`` around ``model`` (the model itself when not distributed)."""
    if not d.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [cfg.device] if cfg.cuda else None
    return DDP(model, device_ids=ids, **kwargs)


def train_phases(cfg: c.RunConfig, model: Any, opt: Any, x: Any, target: Any,
                 after_backward: Callable[[], None] | None = None) -> None:
    """forward / backward / [allreduce_grads] / optimizer_step, each in its NVTX range."""
    _loss = c.forward_backward(opt, lambda: (model(x).float() - target).pow(2).mean(), amp=c.bf16_autocast(cfg),
                               zero_grad=False)
    if after_backward is not None:
        with nv.range("allreduce_grads"):
            after_backward()
    c.optimizer_step(opt, zero_grad=True, name="optimizer_step")


def add_global_batch(parser: argparse.ArgumentParser, smoke: int, full: int) -> None:
    parser.add_argument("--global-batch", type=int, default=None,
                        help=f"rows per step over all ranks (default {smoke} smoke / {full} full; "
                             "each rank takes global/world)")
    parser.set_defaults(_global_batch=(smoke, full))


def global_batch(cfg: c.RunConfig) -> int:
    opts = cfg.options
    if opts.global_batch is not None:
        return int(opts.global_batch)
    return int(c.pick(cfg, *opts._global_batch))


def run(
    name: str,
    description: str | None,
    build: Callable[[c.RunConfig, Dist], c.Step],
    argv: Sequence[str] | None = None,
    *,
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    steps: tuple[int, int] = (3, 10),
    warmup: tuple[int, int] = (1, 3),
    has_twin: bool = True,
) -> int:
    """Entry point of a distributed workload: parse, join the job, build inside ``setup`` (ending
    on a barrier so that every rank starts warming up together), loop, report, leave the job."""
    parser = c.make_parser(name, description, steps=steps, warmup=warmup, has_twin=has_twin)
    if add_arguments is not None:
        add_arguments(parser)
    cfg = c.parse_config(name, parser, argv)
    cfg, d = init(cfg)
    tag = f"{name}:rank{d.rank}" if d.distributed else name
    print(f"[{tag}] variant={cfg.variant} size={cfg.size} device={cfg.device} "
          f"world={d.world} backend={d.backend} warmup={cfg.warmup} steps={cfg.steps} "
          f"nvtx={nv.BACKEND}", flush=True)
    clean = False
    try:
        with nv.range("setup"):
            step = build(cfg, d)
            c.synchronize(cfg.device)
            if d.distributed:
                import torch.distributed as dist

                dist.barrier()
        times = c.run_steps(cfg, step)
        c.report(cfg, times, rank=d.rank, world_size=d.world, backend=d.backend)
        clean = True
    finally:
        shutdown(d, clean=clean)
    return 0
