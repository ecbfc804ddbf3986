"""The Dask side of a job (:mod:`analyzer.job.run`): what runs on the workers, and waiting for it.

Only plain data travels or is held as a task result: a phase-1 task returns its file's
:class:`~analyzer.job.rank.RankSummary` objects and the address of the worker that ran it; a phase-2
task returns one :class:`~analyzer.job.rank.RankResult`. The ranks' traces and fact stores (which hold
locks and whole traces, and must never be pickled) stay in a registry in the worker's process
(:data:`_STATES`) between the phases, with the rank's summary; the phase-2 task of a rank is pinned to
that worker and takes its state out of the registry (it is freed after its last reader). When the
inputs are not one job, each input of one process is finished on its own there instead
(:func:`alone_task`), returning an :class:`~analyzer.job.rank.AloneResult` (its findings and packed
report section): the client never loads a trace. The inputs' Nsight Compute data, if any, is sent to
the workers once and joined to each trace as the serial path joins it.

What crosses per rank is bounded by the rank, never by the job: the rule pack is sent to the workers
once per job (scattered; every phase-2 task refers to it), a phase-2 task carries its rank's number and
:class:`~analyzer.job.rank.RankJobInput` (not the summary the worker already holds), and its result
comes back without the summary's communication kernels (the client has them).

Nothing waits forever. Every wait on tasks goes through :func:`wait_for`, which gives up with one
:class:`~analyzer.errors.ClusterError` line when

- a task raised (its error, one line; a user error such as an unreadable trace keeps its message),
- a result or an argument cannot be serialized,
- a worker died (killed, or over its memory limit) and Dask gave up on the task, or the worker
  holding a rank's state between the phases left,
- no task finished for :func:`stall_timeout` seconds: ``ANALYZER_DASK_TIMEOUT`` (seconds) when set,
  else :data:`DEFAULT_STALL_S`, or the per-trace ``--timeout`` when that is longer. The clock starts
  again at every finished task, so a job of many ranks on few workers is not cut short.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from analyzer.errors import ClusterError, InputError

if TYPE_CHECKING:  # the boundary's types (the task bodies import their modules when they run)
    from typing import TypeAlias

    from distributed import Client

    from analyzer.job.rank import AloneResult, RankJobInput, RankResult, RankState, RankSummary
    from analyzer.loading.model import NcuReport
    from analyzer.rules.model import RulePack
    from analyzer.trace_analysis import AnalysisOptions

    #: where a job's phases run: a connected Dask ``Client``, a scheduler address, or ``"local"``
    Scheduler: TypeAlias = "str | Client"

#: seconds without any finished task before a Dask job gives up (``ANALYZER_DASK_TIMEOUT`` overrides)
DEFAULT_STALL_S = 600.0
TIMEOUT_ENV = "ANALYZER_DASK_TIMEOUT"
#: how often a wait looks at the cluster (workers that left) while tasks run
POLL_S = 0.5

# -- worker side -------------------------------------------------------------------------------------
#: (job token, input index, rank index in the file) -> the rank's state and summary, in each worker's process
_STATES: dict[tuple[str, int, int], tuple[RankState, RankSummary]] = {}
_LOCK = threading.Lock()


def _worker_address() -> str:
    from distributed import get_worker

    return str(get_worker().address)


def _error(err: BaseException) -> dict[str, Any]:
    """A task's error as plain data (exceptions with their own constructors may not unpickle)."""
    from analyzer.errors import AnalyzerError

    return {"error": str(err) or type(err).__name__, "kind": type(err).__name__,
            "user": isinstance(err, AnalyzerError), "exit_code": getattr(err, "exit_code", 2)}


def phase1_task(path: str, index: int, options: AnalysisOptions, token: str,
                ncu: NcuReport | None = None) -> dict[str, Any]:
    """Phase 1 of one input file on a worker: its rank summaries and this worker's address; the
    ranks' states stay in this process. ``ncu``: the Nsight Compute data the inputs gave (joined to a
    file of one process, as the serial path does)."""
    from analyzer.job.rank import prepare_file

    try:
        fs = prepare_file(path, index, options, ncu)
        with _LOCK:
            for i, (st, summary) in enumerate(zip(fs.states, fs.summaries)):
                _STATES[(token, index, i)] = (st, summary)
        return {"worker": _worker_address(), "summaries": fs.summaries}
    except Exception as err:  # noqa: BLE001 - reported as one line by the client
        return _error(err)


def phase2_task(token: str, index: int, part: int, rank_index: int, pack: RulePack,
                inp: RankJobInput | None) -> RankResult | dict[str, Any]:
    """Phase 2 of one rank, on the worker that prepared it (its state leaves the registry);
    ``rank_index``: the rank's input index over the whole job (numbered on the client)."""
    from analyzer.job.rank import finish_rank

    with _LOCK:
        held = _STATES.pop((token, index, part), None)
    if held is None:
        return {"error": f"the prepared state of input {rank_index + 1} is gone from worker "
                         f"{_worker_address()} (the worker restarted)", "kind": "lost", "user": False,
                "exit_code": 2}
    state, summary = held
    summary.index = rank_index
    try:
        result = finish_rank(state, summary, pack, inp)
    except Exception as err:  # noqa: BLE001
        return _error(err)
    return to_client(result)


def alone_task(token: str, index: int, pack: RulePack, position: int, multi: bool) -> AloneResult | dict[str, Any]:
    """Input ``index`` (one process) finished on its own, on the worker that prepared it, when the inputs
    are not one job (:func:`analyzer.job.rank.finish_alone`): its trace and facts stay here."""
    from analyzer.job.rank import finish_alone

    with _LOCK:
        held = _STATES.pop((token, index, 0), None)
    if held is None:
        return {"error": f"the prepared state of input {position} is gone from worker {_worker_address()} "
                         "(the worker restarted)", "kind": "lost", "user": False, "exit_code": 2}
    try:
        return finish_alone(held[0], pack, position, multi)
    except Exception as err:  # noqa: BLE001
        return _error(err)


def to_client(result: RankResult) -> RankResult:
    """``result`` as a phase-2 task returns it: without its summary's communication kernels (the client
    holds the rank's summary and puts it back)."""
    import dataclasses

    result.summary = dataclasses.replace(result.summary, comm=result.summary.comm.iloc[:0])
    return result


def forget(token: str) -> int:
    """Drop every rank state of job ``token`` held in this process (after a failure, or when the inputs
    turn out not to be one job); the number dropped."""
    with _LOCK:
        keys = [k for k in _STATES if k[0] == token]
        for k in keys:
            del _STATES[k]
    return len(keys)


# -- client side -------------------------------------------------------------------------------------
def stall_timeout(options: AnalysisOptions | None = None) -> float:
    """Seconds a Dask wait allows without any task finishing (see the module docstring)."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if raw:
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not (value > 0 and value < float("inf")):
            raise ClusterError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds above 0",
                               hint=f"e.g. {TIMEOUT_ENV}=900, or unset it for {DEFAULT_STALL_S:.0f} s")
        return value
    per_trace = getattr(options, "timeout", None) or 0.0
    return max(DEFAULT_STALL_S, float(per_trace))


#: seconds one question to the scheduler (which workers are there) may take
ASK_S = 10.0


def _workers(client: Any) -> dict[str, Any] | None:
    """The scheduler's workers (address -> info), None when it does not answer within :data:`ASK_S`
    (``Client.scheduler_info`` waits for a scheduler that hangs without closing its connection)."""
    try:
        info = client.sync(client.scheduler.identity, n_workers=-1, callback_timeout=ASK_S)
        return dict(info.get("workers", {}))
    except Exception:  # noqa: BLE001 - the scheduler is unreachable or stuck: the stall timeout decides
        return None


def _alive(client: Any) -> set[str] | None:
    workers = _workers(client)
    return None if workers is None else set(workers)


def _paused(client: Any) -> list[str]:
    workers = _workers(client) or {}
    return [a for a, w in workers.items() if str(w.get("status", "")).lower().endswith("paused")]


def _raise_killed(what: str) -> NoReturn:
    raise ClusterError(f"a Dask worker died while {what} (killed, or over its memory limit)",
                       hint="give the workers more memory (fewer per host) or analyze fewer ranks at once") from None


def _raise_failed(future: Any, what: str) -> None:
    try:
        err = future.exception(timeout=5)
    except Exception:  # noqa: BLE001 - cancelled (the task is gone), or its error cannot be read back
        err = None
    name = type(err).__name__ if err is not None else ""
    if name == "KilledWorker":
        _raise_killed(what)
    if err is None or future.status == "cancelled":
        raise ClusterError(f"Dask dropped a task while {what} (its worker or the scheduler was lost)",
                           hint="check the cluster, or run without --scheduler") from None
    text = str(err) or name
    if "serializ" in text.lower() or "pickle" in text.lower():
        raise ClusterError(f"a task's data could not be serialized for Dask while {what} ({text.splitlines()[0]})",
                           hint="run without --scheduler, and please report it") from None
    raise ClusterError(f"{what} failed on a Dask worker: {name}: {text.splitlines()[0]}",
                       hint="run without --scheduler to see it here") from None


def _check(result: Any, what: str) -> Any:
    """A task's result, or its plain error raised here as one line."""
    if isinstance(result, dict) and "error" in result:
        if result.get("user"):
            raise ClusterError(str(result["error"]), exit_code=int(result.get("exit_code") or 2))
        raise ClusterError(f"{what} failed on a Dask worker: {result['kind']}: {result['error']}",
                           hint="run without --scheduler to see it here")
    return result


def wait_for(client: Any, futures: Sequence[Any], what: Callable[[int], str], *, stall_s: float,
             pinned: dict[int, str] | None = None) -> list[Any]:
    """The results of ``futures`` (in order), never waiting forever (see the module docstring).
    ``what(i)`` names future i in messages; ``pinned``: future i -> the worker it must run on (a worker
    that left fails the wait at once)."""
    pending = set(range(len(futures)))
    results: list[Any] = [None] * len(futures)
    last = time.monotonic()
    # woken by the futures themselves: ``distributed.wait(futures, timeout=...)`` keeps about 2.5 KB per
    # future at every call that times out (a client polling 128 pending futures grew 0.3 MB a call)
    woken = threading.Event()
    for f in futures:
        f.add_done_callback(lambda _f: woken.set())
    while pending:
        woken.wait(POLL_S)
        woken.clear()
        finished = [i for i in pending if futures[i].done()]
        for i in finished:
            f = futures[i]
            if f.status != "finished":
                _raise_failed(f, what(i))
            try:
                results[i] = _check(f.result(timeout=stall_s), what(i))
            except ClusterError:
                raise
            except Exception as err:  # noqa: BLE001 - reading the result back failed (serialization)
                if type(err).__name__ == "KilledWorker":  # the worker died after the status was read
                    _raise_killed(what(i))
                text = str(err).splitlines()[0] if str(err) else type(err).__name__
                raise ClusterError(f"a result could not be read back from Dask while {what(i)} ({text})",
                                   hint="run without --scheduler, and please report it") from None
            f.release()
            pending.discard(i)
        now = time.monotonic()
        if finished:
            last = now
            continue
        if pinned:
            alive = _alive(client)
            gone = sorted({pinned[i] for i in pending if i in pinned} - alive) if alive is not None else []
            if gone:
                lost = [what(i) for i in sorted(pending) if pinned.get(i) in gone]
                raise ClusterError(f"the Dask worker {gone[0]} left while {lost[0]}"
                                   f"{f' (and {len(lost) - 1} more rank(s) it held)' if len(lost) > 1 else ''}; "
                                   "it was killed, or went over its memory limit",
                                   hint="give the workers more memory (fewer per host) or analyze fewer ranks at once")
        if now - last > stall_s:
            paused = _paused(client)
            why = f" ({len(paused)} worker(s) paused for memory)" if paused else ""
            raise ClusterError(f"no Dask task finished in {stall_s:g} s, still {what(min(pending))}"
                               f"{why}; {len(pending)} of {len(futures)} task(s) pending",
                               hint=f"check the cluster, or set {TIMEOUT_ENV}=SECONDS for a longer wait")
    return results


@contextmanager
def quiet_dask() -> Iterator[None]:
    """Dask's own log lines (a worker restarting, a task's traceback) are not shown to the user: the job
    reports one line of its own. ``ANALYZER_DEBUG=1`` keeps them."""
    if os.environ.get("ANALYZER_DEBUG"):
        yield
        return
    log = logging.getLogger("distributed")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


class DaskRunner:
    """Runs the phases of :func:`analyzer.job.run.analyze_job` as Dask tasks (see the module docstring)."""

    def __init__(self, client: Client, options: AnalysisOptions | None = None, ncu: NcuReport | None = None) -> None:
        self.client = client
        self.ncu = ncu  # the inputs' Nsight Compute data, sent to the workers once
        self.token = uuid.uuid4().hex
        self.stall_s = stall_timeout(options)
        self.where: list[str] = []  # input -> the worker holding its ranks' states
        self.summaries: list[list[RankSummary]] = []
        self.stride = 1 << 20  # input i's ranks are keyed from i * stride (renumbered on the client)

    def _submit(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        try:
            return self.client.submit(fn, *args, pure=False, **kw)
        except Exception as err:  # noqa: BLE001 - an argument cannot be serialized
            text = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ClusterError(f"a Dask task could not be sent ({type(err).__name__}: {text[:300]})",
                               hint="run without --scheduler") from None

    def _scatter(self, value: Any, what: str = "the rules") -> Any:
        """``value`` sent to every worker once (a future the tasks take as an argument), within the
        stall timeout."""
        try:
            return self.client.scatter(value, broadcast=True, hash=False, timeout=self.stall_s)
        except (TimeoutError, OSError) as err:
            raise ClusterError(f"{what} could not be sent to the Dask workers in {self.stall_s:g} s "
                               f"({type(err).__name__})",
                               hint=f"check the cluster, or set {TIMEOUT_ENV}=SECONDS for a longer wait") from None
        except Exception as err:  # noqa: BLE001 - the value cannot be serialized
            text = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ClusterError(f"{what} could not be sent to the Dask workers ({type(err).__name__}: "
                               f"{text[:300]})", hint="run without --scheduler") from None

    def phase1(self, paths: Sequence[Path], options: AnalysisOptions) -> list[list[RankSummary]]:
        # rank indices need the number of ranks per file: a first light pass would read every file
        # twice, so files are numbered in order by a large stride and renumbered afterwards
        ncu = self._scatter(self.ncu, "the Nsight Compute data") if self.ncu is not None else None
        try:
            futures = [self._submit(phase1_task, str(p), i * self.stride, options, self.token, ncu)
                       for i, p in enumerate(paths)]
            out = wait_for(self.client, futures, lambda i: f"preparing {Path(paths[i]).name}", stall_s=self.stall_s)
        finally:
            if ncu is not None:
                ncu.release()
        self.where = [str(r["worker"]) for r in out]
        self.summaries = [list(r["summaries"]) for r in out]
        index = 0
        for file_summaries in self.summaries:
            for s in file_summaries:
                s.index = index
                index += 1
        return self.summaries

    def phase2(self, pack: RulePack, inputs: list[list[RankJobInput | None]]) -> list[list[RankResult]]:
        futures: list[Any] = []
        pinned: dict[int, str] = {}
        names: list[str] = []
        shape: list[int] = []
        shared = self._scatter(pack)  # once per job: every task refers to it
        for f, (inps, sums) in enumerate(zip(inputs, self.summaries)):
            shape.append(len(inps))
            for i, (inp, s) in enumerate(zip(inps, sums)):
                pinned[len(futures)] = self.where[f]
                names.append(f"finishing {s.label}")
                futures.append(self._submit(phase2_task, self.token, f * self.stride, i, s.index, shared, inp,
                                            workers=[self.where[f]], allow_other_workers=False))
        try:
            flat = wait_for(self.client, futures, lambda i: names[i], stall_s=self.stall_s, pinned=pinned)
        finally:
            shared.release()
        out, k = [], 0
        for n in shape:
            out.append(flat[k:k + n])
            k += n
        return out

    def separately(self, pack: RulePack, options: AnalysisOptions) -> list[AloneResult] | None:
        """Each input finished on its own where it was prepared (its trace never reaches the client);
        None when an input is a report of several processes (the caller analyzes it whole,
        :mod:`analyzer.pipeline`)."""
        if any(len(s) != 1 for s in self.summaries):
            self.release()
            return None
        shared = self._scatter(pack)
        multi = len(self.summaries) > 1
        futures = [self._submit(alone_task, self.token, f * self.stride, shared, f + 1, multi,
                                workers=[self.where[f]], allow_other_workers=False)
                   for f in range(len(self.summaries))]
        try:
            return wait_for(self.client, futures, lambda i: f"analyzing {self.summaries[i][0].label}",
                            stall_s=self.stall_s, pinned=dict(enumerate(self.where)))
        finally:
            shared.release()

    def release(self) -> None:
        """Drop what the workers still hold for this job (best effort, never waits)."""
        try:
            self.client.run(forget, self.token, wait=False)
        except Exception:  # noqa: BLE001 - a cluster that is gone holds nothing
            pass


def dask_client(scheduler: Scheduler, workers: int | None) -> tuple[Client, Callable[[], None]]:
    """A Dask client for ``scheduler``: a ``Client`` as is, an address string, or ``"local"`` for a
    local cluster (``workers`` processes, default the cores, memory-limited per worker)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise InputError(Path("--scheduler"), "Dask's distributed package is not installed",
                         hint="pip install 'gpu-trace-analyzer[dask]' (or distributed), or drop --scheduler") from None
    if not isinstance(scheduler, str):
        return scheduler, lambda: None
    if scheduler == "local":
        n = workers or max(1, os.cpu_count() or 1)
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=logging.CRITICAL if not os.environ.get("ANALYZER_DEBUG") else logging.WARN)
        client = Client(cluster)

        def close() -> None:
            for step in (client.close, cluster.close):
                try:
                    step(timeout=30)
                except Exception:  # noqa: BLE001 - closing a broken cluster must not hide the job's error
                    pass

        return client, close
    try:
        client = Client(scheduler, timeout=30)
    except (OSError, TimeoutError) as err:
        raise InputError(Path(scheduler), f"cannot reach the Dask scheduler ({err})",
                         hint="check the address (tcp://host:8786) or drop --scheduler") from None
    return client, lambda: client.close(timeout=30)


__all__ = ["DEFAULT_STALL_S", "DaskRunner", "TIMEOUT_ENV", "dask_client", "quiet_dask", "stall_timeout", "to_client",
           "wait_for"]
