"""Where points run: `local` (this machine's cores, a process pool; no setup) or `ray` (a Ray cluster: the one at
`address`, or a local one started for the sweep). Each yields outcomes as points finish, in any order; the driver
sorts the table, so the results do not depend on the executor."""
from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import tempfile
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from rlsim.errors import Problem, ScenarioError
from rlsim.sweep.compute import PointOutcome, PointTask, compute_point, failed_outcome

Executor = Callable[[Sequence[PointTask], int, "str | None"], Iterator[PointOutcome]]


def run_local(tasks: Sequence[PointTask], workers: int, address: str | None = None) -> Iterator[PointOutcome]:
    """One worker runs the points in this process; more run them in a pool of fresh processes ("spawn": a process
    forked from a notebook or a Ray driver could inherit locks held by threads that do not exist in the child).

    A worker that dies (killed, out of memory) breaks the whole pool: the point it was running is recorded as failed,
    as on Ray, and the points that were in flight beside it run again in a fresh pool."""
    if workers <= 1:
        for task in tasks:
            yield compute_point(task)
        return
    queue = iter(tasks)
    retry: list[PointTask] = []
    while True:
        broken = yield from _pool_run(retry, queue, workers)
        if broken is None:
            return
        dead, in_flight = broken
        for task in dead:
            yield failed_outcome(task, "the local worker running this point died (killed, or out of memory)",
                                 "its process ended without a result; `rlsim sweep --resume` runs it again")
        retry = in_flight


def _pool_run(retry: list[PointTask], queue: Iterator[PointTask], workers: int,
              ) -> Generator[PointOutcome, None, tuple[list[PointTask], list[PointTask]] | None]:
    """Run `retry`, then the queue, in one pool; on a dead worker return (the points whose worker died, the other
    points in flight), else None once all ran."""
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="rlsim-sweep-") as ledger, \
            ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_end_with_the_driver) as pool:
        # Keep a bounded number in flight, so a huge sweep does not pickle every scenario up front.
        submitted = itertools.chain(retry, queue)
        pending = {pool.submit(_compute_logged, task, ledger): task for task in _take(submitted, 4 * workers)}
        while pending:
            processes = dict(getattr(pool, "_processes", None) or {})  # pid -> Process, kept to read exit codes
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            broken = False
            for future in done:
                try:
                    outcome = future.result()
                except BrokenProcessPool:
                    broken = True
                    continue
                del pending[future]
                yield outcome
            if broken:
                # Let the pool's own thread finish reaping its processes first: were both to wait on the same child,
                # the one that lost the race would read no exit code, and a killed worker would pass for a survivor.
                pool.shutdown(wait=True)
                return _after_death(pending, processes, ledger)
            pending.update({pool.submit(_compute_logged, task, ledger): task for task in _take(submitted, len(done))})
    return None


def _end_with_the_driver() -> None:
    """In each worker: ask Linux to kill it when the driver dies, so a killed `rlsim sweep` leaves no worker simulating
    on for minutes (prctl PR_SET_PDEATHSIG; elsewhere workers end when they next look for work)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _compute_logged(task: PointTask, ledger: str) -> PointOutcome:
    """compute_point, with a note of which process runs which point, so a death can be told apart from its victims."""
    mark = os.path.join(ledger, f"{os.getpid()}.running")
    # Written whole under another name, then renamed: a mark seen (or a worker killed) is never an empty file.
    with open(mark + ".new", "w", encoding="utf-8") as note:
        note.write(task.point.id)
    os.replace(mark + ".new", mark)
    try:
        return compute_point(task)
    finally:
        os.remove(mark)


def _after_death(pending: dict, processes: dict, ledger: str) -> tuple[list[PointTask], list[PointTask]]:
    """Split the points in flight when the pool broke: those whose process was killed (its exit code a signal other
    than the pool's own SIGTERM to the survivors) against the rest."""
    by_id = {task.point.id: task for task in pending.values()}
    killed: set[str] = set()
    for pid, process in processes.items():
        mark = os.path.join(ledger, f"{pid}.running")
        process.join(timeout=5)
        if os.path.exists(mark) and process.exitcode not in (None, 0, -signal.SIGTERM):
            with open(mark, encoding="utf-8") as note:
                killed.add(note.read())
    if not processes:  # nothing tells which process died: every point in flight is a suspect, none is run again
        killed = set(by_id)
    # A worker killed between two points lost none: then every point in flight simply runs again.
    dead = [task for point, task in by_id.items() if point in killed]
    return dead, [task for point, task in by_id.items() if point not in killed]


def run_ray(tasks: Sequence[PointTask], workers: int, address: str | None = None) -> Iterator[PointOutcome]:
    """Points as Ray tasks of one CPU each. Joins the cluster at `address` (or RAY_ADDRESS, or one this process already
    joined); otherwise starts a local cluster of `workers` CPUs and stops it afterwards. A point whose worker dies is
    recorded as failed and the sweep goes on."""
    try:
        import ray
    except ImportError:
        raise ScenarioError(Problem("the ray executor needs Ray installed", file="rlsim sweep --executor ray",
                                    valid="pip install 'rlsim[ray]', or --executor local")) from None
    address = address or os.environ.get("RAY_ADDRESS")
    started = not ray.is_initialized()
    if started:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=max(1, workers), include_dashboard=False, log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=1)(compute_point)
        queue = iter(tasks)
        in_flight = max(1, int(ray.cluster_resources().get("CPU", workers))) * 2
        pending = {remote.remote(task): task for task in _take(queue, in_flight)}
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            task = pending.pop(ref)
            pending.update({remote.remote(t): t for t in _take(queue, 1)})
            try:
                yield ray.get(ref)
            except ray.exceptions.RayError as exc:  # the worker died (out of memory, node lost): record, go on
                yield failed_outcome(task, f"{type(exc).__name__}: the Ray worker running this point died", str(exc))
    finally:
        if started:
            ray.shutdown()


def _take(queue: Iterator[PointTask], count: int) -> list[PointTask]:
    taken: list[PointTask] = []
    if count <= 0:
        return taken
    for task in queue:
        taken.append(task)
        if len(taken) == count:
            break
    return taken


EXECUTORS: dict[str, Executor] = {"local": run_local, "ray": run_ray}
