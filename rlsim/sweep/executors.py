"""Where points run: `local` (this machine's cores, a process pool; no setup) or `ray` (a Ray cluster: the one at
`address`, or a local one started for the sweep). Each yields outcomes as points finish, in any order; the driver
sorts the table, so the results do not depend on the executor."""
from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from rlsim.errors import Problem, ScenarioError
from rlsim.sweep.compute import PointOutcome, PointTask, compute_point, failed_outcome

Executor = Callable[[Sequence[PointTask], int, "str | None"], Iterator[PointOutcome]]


def run_local(tasks: Sequence[PointTask], workers: int, address: str | None = None) -> Iterator[PointOutcome]:
    """One worker runs the points in this process; more run them in a pool of fresh processes ("spawn": a process
    forked from a notebook or a Ray driver could inherit locks held by threads that do not exist in the child)."""
    if workers <= 1:
        for task in tasks:
            yield compute_point(task)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        # Keep a bounded number in flight, so a huge sweep does not pickle every scenario up front.
        queue = iter(tasks)
        pending = {pool.submit(compute_point, task) for task in _take(queue, 4 * workers)}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            pending |= {pool.submit(compute_point, task) for task in _take(queue, len(done))}
            for future in done:
                yield future.result()


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
