"""One rank of ``python -m blinkflow.bench elastic`` (started by blinkrun, not by hand).

``python -m blinkflow.bench.elastic_worker loss|gain SLOTS STEPS``: training steps of a 1 MiB
all-reduce under ``blinkflow.elastic.run``, a commit after each.

- ``loss``: at step STEPS the highest rank prints ``EVENT <time>`` and SIGKILLs itself;
- ``gain``: at step STEPS rank 0 prints ``EVENT <time>`` and writes one more slot into the SLOTS
  file that blinkrun's discovery script prints; the job commits (and checks for new ranks) every
  step until the new rank is in.

After each reset, rank 0 prints ``FIRST <time> size <n> reset <seconds>`` when the first step of
the new job is done (every rank has taken part in it: it is an all-reduce).
"""
import os
import signal
import sys
import time

import numpy as np

import blinkflow as bf
from blinkflow.elastic import history
from blinkflow.elastic.run import run_fn
from blinkflow.elastic.state import ObjectState

MODE, SLOTS, STEPS = sys.argv[1], sys.argv[2], int(sys.argv[3])
TAIL = 5   # steps after the new job's first, so it is seen to go on

bf.init()
state = ObjectState(step=0)
reformed = []   # set by the reset callback: the next step is the new job's first
state.register_reset_callbacks([lambda: reformed.append(True)])


def event(rank_that_acts: int) -> bool:
    return state.step == STEPS and bf.rank() == rank_that_acts and not history()


@run_fn
def train(state):
    data = np.ones(1 << 17)   # 1 MiB of float64
    while state.step < STEPS + TAIL or not history():
        if MODE == "loss" and event(bf.size() - 1):
            print(f"EVENT {time.time():.6f}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if MODE == "gain" and event(0):
            print(f"EVENT {time.time():.6f}", flush=True)
            with open(SLOTS, "w") as f:
                f.write(f"localhost:{bf.size() + 1}\n")
        bf.allreduce(data, name="step")
        if reformed and bf.rank() == 0:
            print(f"FIRST {time.time():.6f} size {bf.size()} reset {history()[-1].seconds:.3f}", flush=True)
        reformed.clear()
        state.step += 1
        if MODE == "gain" and state.step >= STEPS and not history():
            time.sleep(0.01)   # the job waits for its new rank, checking at each commit
        state.commit()


train(state)
