"""A new rank gets the job's forwarded variables without their values on a command line or in
the hosts file (test_grow_environment.py): started on 2 ranks by ``blinkrun
--host-discovery-script``; rank 0 offers a third slot at step 3 by writing ``localhost:3`` into
the SLOTS file. Once the job has 3 ranks, every rank says what it sees of the variable NAME, and
rank 0 prints ``RESULT`` and a JSON object: ``seen`` (the value on each rank), ``hosts_file``
(whether the hosts file holds the value), ``command_lines`` (the processes of this machine
whose command line holds it).

``python grow_env_script.py SLOTS NAME``
"""
import json
import os
import sys
import time

import numpy as np

import blinkflow as bf
from blinkflow.config import get_config
from blinkflow.elastic.run import run_fn
from blinkflow.elastic.state import ObjectState

SLOTS, NAME = sys.argv[1], sys.argv[2]


def command_lines_holding(value: str) -> list:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if value.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


bf.init()
state = ObjectState(step=0)


@run_fn
def train(state):
    while bf.size() < 3:
        bf.allreduce(np.ones(4), name="step")
        state.step += 1
        if state.step == 3 and bf.rank() == 0:
            with open(SLOTS, "w") as f:
                f.write("localhost:3\n")
        time.sleep(0.05)
        state.commit()
    seen = bf.allgather_object(os.environ.get(NAME))
    if bf.rank() == 0:
        value = os.environ[NAME]
        with open(get_config().elastic_hosts_file) as f:
            hosts_file = f.read()
        print("RESULT " + json.dumps({"seen": seen, "hosts_file": value in hosts_file,
                                      "command_lines": command_lines_holding(value)}), flush=True)


train(state)
