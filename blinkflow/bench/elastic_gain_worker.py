"""One rank of ``python -m blinkflow.bench elastic-gain`` (blinkrun starts it; see that module).

``python -m blinkflow.bench.elastic_gain_worker SLOTS AFTER_STEPS ELEMENTS``: a float32
all-reduce of ELEMENTS per step under ``blinkflow.elastic.run``, a commit after each. At step
AFTER_STEPS rank 0 writes one more slot into SLOTS (the file blinkrun's discovery script prints)
and the job goes on stepping until the new rank is in, then takes TAIL more steps. Lines (wall
clock of the machine, which every rank shares):

- rank 0: ``SLOT <t>`` (file written), ``NOTICED <t>`` (its commit raised
  HostsUpdatedInterrupt), ``JOINED <t> <reset seconds>`` (the reset returned: spawned, merged,
  runtime started on the larger job), ``FIRST <t> <size>`` (the first all-reduce with the new
  rank done);
- the new rank: ``STARTED <t>`` (its Python began this module), ``INIT <t>`` (its ``init()``
  returned: it joined).
"""
import time

STARTED = time.time()

import os  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

import blinkflow as bf  # noqa: E402
from blinkflow.elastic import history  # noqa: E402
from blinkflow.elastic.run import run_fn  # noqa: E402
from blinkflow.elastic.state import ObjectState  # noqa: E402
from blinkflow.errors import HostsUpdatedInterrupt  # noqa: E402

SLOTS, AFTER_STEPS, ELEMENTS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
TAIL = 5

joining = os.environ.get("BLINKFLOW_ELASTIC_JOINING") == "1"
bf.init()
if joining:
    print(f"STARTED {STARTED:.6f}", flush=True)
    print(f"INIT {time.time():.6f}", flush=True)
state = ObjectState(step=0)
reformed = []


def on_reset():
    reformed.append(True)
    if bf.rank() == 0:
        print(f"JOINED {time.time():.6f} {history()[-1].seconds:.3f}", flush=True)


state.register_reset_callbacks([on_reset])


@run_fn
def train(state):
    data = np.ones(ELEMENTS, dtype=np.float32)
    after = 0   # steps of the grown job
    while after < TAIL:
        if state.step == AFTER_STEPS and bf.rank() == 0 and not history():
            with open(SLOTS, "w") as f:
                f.write(f"localhost:{bf.size() + 1}\n")
            print(f"SLOT {time.time():.6f}", flush=True)
        bf.allreduce(data, name="step")
        if reformed and bf.rank() == 0:
            print(f"FIRST {time.time():.6f} {bf.size()}", flush=True)
        reformed.clear()
        state.step += 1
        after += 1 if history() else 0
        try:
            state.commit()
        except HostsUpdatedInterrupt:
            if bf.rank() == 0:
                print(f"NOTICED {time.time():.6f}", flush=True)
            raise


train(state)
