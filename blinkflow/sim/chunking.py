"""Chunk-size tuning by Blink's MIAD rule (MLSys 2020 §4: multiplicative increase, additive
decrease).

Small chunks fill the pipeline quickly but pay the per-chunk cost many times; large chunks
amortise it but leave links idle while the pipeline fills. Blink starts small, doubles the chunk
while throughput improves, and when it drops backs off by an additive step. We run the same
search against the simulator: each probe is one simulated call.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, List, Tuple

from .engine import SimResult

#: Smallest chunk the search starts from (bytes), and how many chunks the largest tree's range
#: is cut into at the start (whichever gives the larger chunk).
MIN_CHUNK_BYTES = 256 * 1024
START_CHUNKS = 256
MAX_PROBES = 12
#: Cap on the steps of one probe (a simulated call costs ~30 µs of Python per step): big plans
#: (16 GPUs, dozens of trees) start from fewer chunks per tree.
STEP_BUDGET = 30000


@dataclasses.dataclass(frozen=True)
class Tuning:
    chunk_elems: int
    result: SimResult
    probes: Tuple[Tuple[int, float], ...]
    """(chunk_elems, seconds) of every probe, in order."""


def miad(run: Callable[[int], SimResult], largest_job_elems: int, elem_bytes: int = 4,
         start_chunks: int = START_CHUNKS, steps_per_chunk: int = 1, step_budget: int = STEP_BUDGET) -> Tuning:
    """Tune the chunk size for one call shape; ``run(chunk_elems)`` simulates one call.

    ``steps_per_chunk`` (steps of the schedule with one chunk per tree) bounds the start so a
    probe stays within ``step_budget`` steps (:data:`STEP_BUDGET` by default).
    """
    largest = max(1, largest_job_elems)
    start_chunks = max(1, min(start_chunks, step_budget // max(1, steps_per_chunk)))
    chunk = max(MIN_CHUNK_BYTES // elem_bytes, -(-largest // start_chunks))
    chunk = min(chunk, largest)
    best = run(chunk)
    probes: List[Tuple[int, float]] = [(chunk, best.seconds)]
    step = 0
    while chunk < largest and len(probes) < MAX_PROBES:
        bigger = min(largest, chunk * 2)  # multiplicative increase
        r = run(bigger)
        probes.append((bigger, r.seconds))
        if r.seconds < best.seconds:
            chunk, best = bigger, r
            continue
        step = max(1, (bigger - chunk) // 4)  # throughput dropped: additive steps back from it
        break
    if step:
        candidate = chunk + step
        while candidate < min(largest, chunk * 2) and len(probes) < MAX_PROBES:
            r = run(candidate)
            probes.append((candidate, r.seconds))
            if r.seconds >= best.seconds:
                break
            chunk, best = candidate, r
            candidate += step
    return Tuning(chunk, best, tuple(probes))
