"""A new rank that never reaches ``init()`` (test_grow_newcomer.py): started on 2 ranks by
``blinkrun --host-discovery-script``; rank 0 offers a third slot at step 3 by writing
``localhost:3`` into the SLOTS file; the job then commits every step. The new process (told by
``BLINKFLOW_ELASTIC_JOINING``) exits with status 3 at once (MODE ``fails``) or sleeps for an hour
before it would call ``init()`` (MODE ``hangs``).

``python grow_newcomer_script.py MODE SLOTS TOKEN`` (TOKEN: only there so the test can find the
job's processes).
"""
import os
import sys
import time

MODE, SLOTS = sys.argv[1], sys.argv[2]
if os.environ.get("BLINKFLOW_ELASTIC_JOINING") == "1":
    if MODE == "hangs":
        time.sleep(3600)
    sys.exit(3)

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
            with open(SLOTS, "w") as f:
                f.write("localhost:3\n")
        time.sleep(0.05)
        state.commit()


train(state)
