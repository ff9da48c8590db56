"""``python -m blinkflow.bench runner-actions``: the cuda runner's host cost per action.

Run it under MPI, one rank per (virtual) GPU of an HGX H100 plan, on a GPU machine or under the
fake CuPy (``PYTHONPATH=tests/fake_cupy FAKE_CUPY_DEVICES=2 mpirun -np 2 python -m blinkflow.bench
runner-actions``). Each rank times whole all-reduces of the cuda backend with small chunks, so the
bytes cost next to nothing and the call is the host's work: per action of the rank's program a
few CUDA calls, a launch, control messages and Python. Reported per rank: the call's median
seconds, its actions, and microseconds per action; the simulator's runner cost
(``blinkflow.schedule.step_costs.RUNNER_US_PER_ACTION``) is the slowest rank's figure.
"""
from __future__ import annotations

import json
import statistics
import time

import click

from ..sizes import ByteSize


@click.command()
@click.option("--size", type=ByteSize(), default="1MiB", show_default=True, help="Per-rank buffer bytes (float32).")
@click.option("--chunk", type=ByteSize(), default="16KiB", show_default=True,
              help="Pipeline chunk (small: many actions, few bytes each).")
@click.option("--iters", type=click.IntRange(1), default=10, show_default=True, help="Timed calls.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (rank 0).")
def command(size, chunk, iters, as_json):
    """Host microseconds per action of the cuda runner's all-reduce."""
    import numpy as np
    from mpi4py import MPI

    from ..backends.base import BackendContext, Layout
    from ..backends.cuda import CudaBackend
    from ..config import Config
    from ..ops import ReduceOp
    from ..planner import make_plan
    from ..topology.presets import get_preset

    comm = MPI.COMM_WORLD
    devices = tuple(range(comm.size))
    topology = get_preset("hgx-h100")
    layout = Layout(comm.rank, (0,) * comm.size, devices)
    ctx = BackendContext(comm=comm, local_comm=comm, cross_comm=comm.Split(comm.rank, key=0), layout=layout,
                         topology=topology, config=Config(chunk_bytes=int(chunk), algorithm="runner"),
                         plan_for=lambda collective, root=None: make_plan(topology, collective, devices=list(devices),
                                                                           root=root))
    backend = CudaBackend(ctx)
    try:
        nelems = int(size) // 4
        with backend.device_scope():
            buf = backend.buffer(nelems, np.float32)
            buf.fill(1.0)
            _, _, program = backend._program("allreduce", nelems, 4)
            times = []
            for i in range(iters + 2):
                comm.Barrier()
                start = time.perf_counter()
                backend.allreduce(buf, ReduceOp.SUM)
                backend.cupy.cuda.Device(backend.device).synchronize()
                if i >= 2:  # two warm-up calls: lowering, compiling, the arena
                    times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        mine = {"rank": comm.rank, "seconds": seconds, "actions": len(program.actions),
                "us_per_action": seconds / len(program.actions) * 1e6}
        every = comm.gather(mine, root=0)
    finally:
        backend.close()
    if comm.rank == 0:
        row = {"ranks": comm.size, "size_bytes": int(size), "chunk_bytes": int(chunk), "iters": iters,
               "per_rank": every, "us_per_action": max(r["us_per_action"] for r in every)}
        if as_json:
            click.echo(json.dumps(row, indent=2))
        else:
            for r in every:
                click.echo(f"rank {r['rank']}: {r['seconds'] * 1e3:.2f} ms, {r['actions']} actions, "
                           f"{r['us_per_action']:.1f} us per action")
            click.echo(f"slowest: {row['us_per_action']:.1f} us per action")
