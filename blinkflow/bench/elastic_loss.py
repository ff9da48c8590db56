"""``python -m blinkflow.bench elastic-loss``: how long an elastic job takes from a rank's death
to its first step on the survivors.

Run it under ``mpirun --with-ft ulfm -np N`` (N >= 2). Every rank runs small all-reduces, one a
step; at a moment agreed in advance (``--after`` seconds on from a broadcast wall-clock time; the
ranks share a machine's clock) the last rank SIGKILLs itself. Each survivor measures, from that
moment: when its collective failed (*noticed*), when :func:`blinkflow.elastic.reform` returned
(*re-formed*), and when its first all-reduce on the new job completed (*first step*). The new
rank 0 prints the slowest survivor's times as one JSON line.
"""
from __future__ import annotations

import json
import os
import signal
import time

import click


@click.command()
@click.option("--after", type=click.FloatRange(min=0.5), default=2.0, show_default=True,
              help="seconds of steps before the last rank is killed")
@click.option("--elements", type=click.IntRange(min=1), default=1 << 16, show_default=True,
              help="float32 elements of each step's all-reduce")
def command(after: float, elements: int) -> None:
    import numpy as np

    import blinkflow as bf
    from blinkflow.elastic import reform
    from blinkflow.errors import ShutdownError

    bf.init()
    size = bf.size()
    if size < 2:
        raise click.UsageError("run it on at least 2 ranks (mpirun --with-ft ulfm -np N)")
    kill_at = bf.broadcast_object(time.time() + after, root_rank=0)
    victim = bf.rank() == size - 1
    data = np.ones(elements, dtype=np.float32)
    step = 0
    try:
        while True:
            if victim and time.time() >= kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            bf.allreduce(data, name=f"step.{step}")
            step += 1
    except ShutdownError:
        noticed = time.time() - kill_at
    reset = reform()
    reformed = time.time() - kill_at
    bf.allreduce(data, name="first")
    first = time.time() - kill_at
    slowest = bf.allreduce(np.array([noticed, reformed, first]), op=bf.Max, name="times")
    if bf.rank() == 0:
        click.echo(json.dumps({"ranks": size, "survivors": reset.new_size, "noticed_s": round(float(slowest[0]), 4),
                               "reformed_s": round(float(slowest[1]), 4),
                               "first_step_s": round(float(slowest[2]), 4),
                               "rate_gbps": [reset.old_rate_gbps, reset.new_rate_gbps]}))
    bf.shutdown()
