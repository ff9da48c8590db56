"""What the elastic loss scripts (loss_script.py, reform_loss_script.py) share."""
import time

import numpy as np

import blinkflow as bf
from blinkflow.errors import ShutdownError


def reduce_until_the_loss_is_noticed(name: str) -> None:
    """All-reduce every 10 ms until a call raises because a rank was lost; AssertionError when a
    thousand calls went through."""
    try:
        for step in range(1000):
            bf.allreduce(np.ones(16), name=f"{name}.{step}")
            time.sleep(0.01)
    except ShutdownError:
        return
    raise AssertionError("collectives went on after a rank was killed")
