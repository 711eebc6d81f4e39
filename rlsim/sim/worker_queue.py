"""When jobs finish on a pool of identical workers that serve them first come, first served (a reward pool's CPU
workers or sandboxes). Compiled with the engine (rlsim/compiled_engine.py): a step scores every one of its samples."""
from __future__ import annotations

import heapq


def fifo_completions(free_at: list[float], workers: int, arrivals: list[float], services: list[float]) -> list[float]:
    """When each job, arriving at `arrivals[i]` (in order) and taking `services[i]`, is done: the earliest free worker
    takes it. `free_at` is a heap of when each worker that has served is free again, updated in place; a worker that
    never served is free from the start, so it has no entry (the heap grows with the jobs, not with the pool)."""
    done: list[float] = []
    for index in range(len(arrivals)):
        start = arrivals[index]
        if len(free_at) >= workers:
            free = heapq.heappop(free_at)
            if free > start:  # max(arrival, free), by comparison
                start = free
        end = start + services[index]
        heapq.heappush(free_at, end)
        done.append(end)
    return done
