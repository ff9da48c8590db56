"""A new rank that hangs before ``init()`` (test_grow_newcomer_hangs.py): started on 2 ranks by
``blinkrun --host-discovery-script --elastic-timeout 5``; rank 0 offers a third slot at step 3
by writing ``localhost:3`` into the SLOTS file; the job then commits every step. The new process
(told by ``BLINKFLOW_ELASTIC_JOINING``) sleeps for an hour before it would call ``init()``.

``python grow_newcomer_hangs_script.py SLOTS TOKEN`` (TOKEN: only there so the test can find the
job's processes).
"""
import os
import sys
import time

if os.environ.get("BLINKFLOW_ELASTIC_JOINING") == "1":
    time.sleep(3600)

import numpy as np  # noqa: E402

import blinkflow as bf  # noqa: E402
from blinkflow.elastic.run import run_fn  # noqa: E402
from blinkflow.elastic.state import ObjectState  # noqa: E402

bf.init()
state = ObjectState(step=0)


@run_fn
def train(state):
    while True:
        bf.allreduce(np.ones(4), name="step")
        state.step += 1
        if state.step == 3 and bf.rank() == 0:
            with open(sys.argv[1], "w") as f:
                f.write("localhost:3\n")
        time.sleep(0.05)
        state.commit()


train(state)
