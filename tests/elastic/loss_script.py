"""Losing ranks, on the runtime alone (no TensorFlow): run by test_losing_ranks.py on 4 ranks under
``mpirun --with-ft ulfm`` with ``BLINKFLOW_TOPOLOGY=dgx1-v100`` and ``BLINKFLOW_ELASTIC_MIN_NP=3``.

1. Rank 2 is SIGKILLed inside an all-reduce (after its 4th chunk transfer: peers hold part of its
   data). Every survivor's call raises; its input is untouched; ``reform()`` re-forms the job on
   GPUs 0, 1, 3 and the all-reduce plan is printed for the test to compare with ``blinkrun plan``;
   the all-reduce of the same inputs on the survivors is recomputed exactly (integer values).
2. The new rank 2 (old rank 3) dies between collectives: two ranks are left, fewer than the
   minimum of three, so ``reform()`` raises TooFewRanksError on both, naming the lost rank, and
   the processes leave with status 1.
Lines: ``FAILED``, ``RESET``, ``PLAN``, ``RECOMPUTED``, ``TOOFEW``, one per surviving rank.
"""
import json
import os
import signal
import time

import numpy as np

import blinkflow as bf
from blinkflow.elastic import reform
from blinkflow.errors import RanksLostError, ShutdownError, TooFewRanksError
from blinkflow.runtime.global_state import RUNTIME
from losses import reduce_until_the_loss_is_noticed

ELEMENTS = 1 << 20  # 8 MiB of float64: many chunks, so the victim dies with the collective under way


def die_inside_the_next_collective(after_transfers: int) -> None:
    from blinkflow.backends.cpu.transport import CpuTransport

    issue, count = CpuTransport.issue, [0]

    def issue_then_die(self, *args, **kwargs):
        count[0] += 1
        if count[0] == after_transfers:
            os.kill(os.getpid(), signal.SIGKILL)
        return issue(self, *args, **kwargs)

    CpuTransport.issue = issue_then_die


def inputs(old_rank: int) -> np.ndarray:
    return np.arange(ELEMENTS, dtype=np.float64) % 1000 + 1000 * old_rank  # integers: every sum is exact


bf.init()
first = bf.rank()
assert bf.size() == 4 and os.environ.get("BLINKFLOW_ELASTIC_MIN_NP") == "3"
bf.allreduce(np.ones(16), name="warm")
if first == 2:
    die_inside_the_next_collective(after_transfers=4)
mine = inputs(first)
untouched = mine.copy()
try:
    bf.allreduce(mine, op=bf.Sum, name="in_flight")
    raise AssertionError("the all-reduce with a rank killed inside it returned")
except ShutdownError as error:
    assert isinstance(error, RanksLostError) and error.ranks == [2], repr(error)
    assert np.array_equal(mine, untouched), "the failed all-reduce wrote into its input"
    print(f"FAILED rank {first} {type(error).__name__} ranks={error.ranks}", flush=True)

reset = reform()
assert reset.lost == (2,) and bf.size() == 3, reset
job = RUNTIME.engine.job
plan = job.plans.get("allreduce")
print(f"RESET rank {first} new {bf.rank()} lost {list(reset.lost)} devices {','.join(map(str, job.devices))}",
      flush=True)
print(f"RESET_SECONDS rank {first} {reset.seconds:.3f}", flush=True)
if bf.rank() == 0:
    print("PLAN " + json.dumps({"rate_gbps": plan.rate_gbps, "trees": [t.to_dict() for t in plan.trees]}), flush=True)
got = bf.allreduce(mine, op=bf.Sum, name="in_flight")
assert np.array_equal(got, sum(inputs(r) for r in (0, 1, 3))), "the survivors' all-reduce is not the recomputation"
print(f"RECOMPUTED rank {first}", flush=True)

if bf.rank() == 2:
    os.kill(os.getpid(), signal.SIGKILL)
reduce_until_the_loss_is_noticed("after")
try:
    reform()
    raise AssertionError("the job re-formed below BLINKFLOW_ELASTIC_MIN_NP")
except TooFewRanksError as error:
    print(f"TOOFEW rank {first} lost={error.lost} left={error.left}: {error}", flush=True)
    # The first survivor to leave with status 1 makes mpirun end the others: let both print first.
    time.sleep(2)
    raise
