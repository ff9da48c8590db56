"""Online search of the runtime's knobs while a job trains (``BLINKFLOW_AUTOTUNE=1``,
``blinkrun --autotune``, Horovod's ``HOROVOD_AUTOTUNE``).

What is tuned: the fusion threshold (how many bytes of ready all-reduces are fused into one
collective) and the cycle time (how often an idle runtime negotiates). The score of a setting is
the job's all-reduce throughput while it is in force: bytes reduced per second of wall time over
``steps_per_sample`` cycles that ran all-reduces. Wall time includes the computation between
steps, so a setting that overlaps communication better, or fuses into fewer collectives, scores
higher; the search is :class:`~.bayes_opt.BayesianSearch` (Horovod's autotuner searches the same
knobs the same way).

Not tuned, and why: the gradient bucket size is fixed when a ``tf.function`` step is traced (the
submissions are part of the graph), so it cannot change while a compiled step runs; the pipeline
chunk is part of the schedules every rank agreed on at start-up. Set them with
``BLINKFLOW_BUCKET_BYTES`` and ``BLINKFLOW_CHUNK_BYTES``.

Agreement: only the global process set's coordinator (its rank 0) measures and decides; a new
setting travels in the negotiation's broadcast (:mod:`.negotiation`) and every rank applies it at
the same place in the one order of responses, so ranks always fuse alike. After
``warmup_samples`` discarded samples and ``max_samples`` scored ones, the best setting is applied
for the rest of the job. Each sample is a row of the log file (``BLINKFLOW_AUTOTUNE_LOG_FILE``).
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import List, Optional, Sequence

from .bayes_opt import BayesianSearch
from .log import logger

MIB = 1 << 20
#: The box searched, in log space: fusion threshold 1 MiB .. 256 MiB, cycle time 1 .. 50 ms.
FUSION_RANGE = (1 * MIB, 256 * MIB)
CYCLE_RANGE_MS = (1.0, 50.0)
LOG_HEADER = "sample,phase,fusion_threshold_bytes,cycle_time_ms,score_bytes_per_s"


@dataclasses.dataclass(frozen=True)
class Knobs:
    """The tuned settings, as every rank applies them."""

    fusion_threshold: int
    cycle_time_ms: float

    def point(self) -> List[float]:
        """This setting in the search's unit box."""
        return [_to_unit(self.fusion_threshold, FUSION_RANGE), _to_unit(self.cycle_time_ms, CYCLE_RANGE_MS)]

    @classmethod
    def at(cls, point: Sequence[float]) -> "Knobs":
        fusion = int(round(_from_unit(point[0], FUSION_RANGE) / 4096)) * 4096  # whole pages
        return cls(fusion, round(_from_unit(point[1], CYCLE_RANGE_MS), 3))


class Autotuner:
    """Rank 0's search. Feed :meth:`observe` once per cycle that ran all-reduces; it returns
    the next :class:`Knobs` to put in force (every rank applies them together) or None."""

    def __init__(self, start: Knobs, warmup_samples: int = 3, steps_per_sample: int = 10,
                 max_samples: int = 20, noise: float = 0.8, log_file: Optional[str] = None, clock=time.monotonic):
        self.current = start
        self.warmup_left = warmup_samples
        self.steps_per_sample = max(1, steps_per_sample)
        self.max_samples = max_samples
        self.search = BayesianSearch(dims=2, noise=noise)
        self.clock = clock
        self.log_file = log_file
        self.samples = 0
        """Samples taken, warm-up included (the log's row numbers)."""
        self.done = max_samples <= 0
        self._steps = 0
        self._bytes = 0
        self._started: Optional[float] = None
        if log_file:
            with open(log_file, "w") as out:
                out.write(LOG_HEADER + "\n")

    def observe(self, nbytes: int) -> Optional[Knobs]:
        """A cycle with ``nbytes`` of all-reduces ran under :attr:`current`."""
        if self.done:
            return None
        now = self.clock()
        if self._started is None:  # the sample starts at its first cycle
            self._started, self._steps, self._bytes = now, 0, 0
            return None
        self._steps += 1
        self._bytes += nbytes
        if self._steps < self.steps_per_sample:
            return None
        elapsed = max(now - self._started, 1e-9)
        self._started = None
        return self._scored(self._bytes / elapsed)

    def _scored(self, score: float) -> Optional[Knobs]:
        self.samples += 1
        if self.warmup_left > 0:
            self.warmup_left -= 1
            self._log("warmup", self.current, score)
            return None
        self.search.observe(self.current.point(), score)
        self._log("sample", self.current, score)
        if len(self.search.scores) >= self.max_samples:
            self.done = True
            best = Knobs.at(self.search.best())
            self._log("best", best, max(self.search.scores))
            logger.info("autotune: keeping fusion threshold %d bytes and cycle time %g ms after %d samples "
                        "(%.3g bytes/s)", best.fusion_threshold, best.cycle_time_ms, len(self.search.scores),
                        max(self.search.scores))
            return self._switch(best)
        return self._switch(Knobs.at(self.search.propose()))

    def _switch(self, knobs: Knobs) -> Optional[Knobs]:
        if knobs == self.current:
            return None
        self.current = knobs
        return knobs

    def _log(self, phase: str, knobs: Knobs, score: float) -> None:
        if self.log_file:
            with open(self.log_file, "a") as out:
                out.write(f"{self.samples},{phase},{knobs.fusion_threshold},{knobs.cycle_time_ms:g},{score:.6g}\n")


def _to_unit(value: float, bounds) -> float:
    low, high = bounds
    value = min(max(value, low), high)
    return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))


def _from_unit(x: float, bounds) -> float:
    low, high = bounds
    return math.exp(math.log(low) + min(max(float(x), 0.0), 1.0) * (math.log(high) - math.log(low)))
