"""Ranks lost while the job re-forms, on the runtime alone (no TensorFlow): run by
test_losses_while_reforming.py on 5 ranks under ``mpirun --with-ft ulfm`` with
``BLINKFLOW_ELASTIC_MIN_NP=2``. Ranks that fail together are found one after another (Open MPI's
detector suspects paused ranks about a timeout apart), so a rank the shrink kept may be gone
before the job has started again on it.

1. Rank 4 is SIGKILLed between collectives; in the reset, rank 3 dies as it begins to start the
   new job (after the shrink that kept it), so the others' first step on the new communicator
   fails on some of them: ranks 0-2 agree that the start failed, shrink again and go on, 5 -> 3.
   Lines, per survivor: ``RESET rank FIRST new NEW lost [...] size N``, ``SUM rank FIRST got G``
   (an all-reduce of each survivor's first rank on the new job) and ``DONE rank FIRST``.
2. A reset whose start fails on rank 2 without a rank lost (an error of its own): the next shrink
   loses nobody, so the reset ends on every rank instead of trying again: ``ENDED rank FIRST
   <error class>: <message>``.

Every rank leaves with status 1 (its job ended broken), so its lines go through ``harness.say``.
"""
import importlib
import os
import signal

import numpy as np

import blinkflow as bf
from blinkflow.errors import ShutdownError
from harness import say
from losses import reduce_until_the_loss_is_noticed

reforming = importlib.import_module("blinkflow.elastic.reform")   # the package exports its function by that name


def die(*_args, **_kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


bf.init()
first = bf.rank()
assert bf.size() == 5 and os.environ.get("BLINKFLOW_ELASTIC_MIN_NP") == "2"
if first == 4:
    die()
if first == 3:
    reforming._start = die   # after the shrink that kept this rank, before the new job starts on it
reduce_until_the_loss_is_noticed("step")
reset = reforming.reform()
say(f"RESET rank {first} new {bf.rank()} lost {list(reset.lost)} size {bf.size()}")
got = bf.allreduce(np.full(8, float(first)), op=bf.Sum, name="sum")
say(f"SUM rank {first} got {int(got[0])}")
say(f"DONE rank {first}")


def fail_to_start(*_args, **_kwargs):
    raise RuntimeError("a start that fails on this rank alone")


if first == 2:
    reforming._start = fail_to_start
try:
    reforming.reform()
    raise AssertionError("the reset went on after a start failed without a rank lost")
except (RuntimeError, ShutdownError) as error:
    say(f"ENDED rank {first} {type(error).__name__}: {error}")   # then leaves with status 1: see harness.say
