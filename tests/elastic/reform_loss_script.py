"""Ranks lost while the job re-forms, on the runtime alone (no TensorFlow): run by
test_losses_while_reforming.py on 5 ranks under ``mpirun --with-ft ulfm`` with
``BLINKFLOW_ELASTIC_MIN_NP=1``. Ranks that fail together are found one after another (Open MPI's
detector suspects paused ranks about a timeout apart), so a rank the shrink kept may be gone
before the job has started again on it.

1. Rank 4 is SIGKILLed between collectives; in the reset, rank 3 dies as it begins to start the
   new job (after the shrink that kept it), so the others' first step on the new communicator
   fails: ranks 0-2 shrink again and go on, 5 -> 3.
2. New rank 2 is SIGKILLed; in the reset, new rank 1 dies once the new job has started on it,
   before the ranks agree that it started everywhere: rank 0 retires the job it started, shrinks
   again and goes on alone, 3 -> 1.
Lines, per survivor after each: ``RESET rank FIRST new NEW lost [...] size N`` and ``SUM rank
FIRST got G`` (an all-reduce of each survivor's first rank on the new job).
"""
import importlib
import os
import signal
import time

import numpy as np

import blinkflow as bf
from blinkflow.errors import ShutdownError

reforming = importlib.import_module("blinkflow.elastic.reform")   # the package exports its function by that name


def die(*_args, **_kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


def lose(victim: int, dies_reforming: int, step: str) -> None:
    """``victim`` dies now; ``dies_reforming`` dies in the reset, at ``step`` of reform.py."""
    if bf.rank() == victim:
        die()
    if bf.rank() == dies_reforming:
        setattr(reforming, step, die)
    try:
        for i in range(1000):
            bf.allreduce(np.ones(16), name=f"{step}.{i}")
            time.sleep(0.01)
        raise AssertionError("collectives went on after a rank was killed")
    except ShutdownError:
        pass
    reset = reforming.reform()
    print(f"RESET rank {first} new {bf.rank()} lost {list(reset.lost)} size {bf.size()}", flush=True)
    got = bf.allreduce(np.full(8, float(first)), op=bf.Sum, name=f"sum.{step}")
    print(f"SUM rank {first} got {int(got[0])}", flush=True)


bf.init()
first = bf.rank()
assert bf.size() == 5 and os.environ.get("BLINKFLOW_ELASTIC_MIN_NP") == "1"
lose(victim=4, dies_reforming=3, step="_start")
lose(victim=2, dies_reforming=1, step="_agree")
print(f"DONE rank {first}", flush=True)
