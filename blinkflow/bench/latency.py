"""``python -m blinkflow.bench latency``: one small all-reduce's latency, hop by hop.

A 1-float all-reduce moves nothing worth timing: what it takes is the route's own cost (two
thread hand-offs, a negotiation round, the executor, the backend's algorithm). Three jobs, each
through mpirun, in turn for ``--rounds`` rounds (:mod:`.latency_worker`):

* **blinkflow**: the median of ``--calls`` synchronous calls from numpy, then the same calls
  stamped at the route's hops (docs/runtime.md), printed as a table of where the time goes;
* **mpi**: ``MPI_Allreduce`` of one float in a job where blinkflow never started;
* **tf** (``--tf``): TensorFlow's floor on the same machine (a ``tf.function`` adding one, one
  crossing to Python and back by ``tf.numpy_function``) beside blinkflow's all-reduce in a
  ``tf.function``, in blocks of calls taken in turn.

docs/overlap.md ("One small all-reduce") records the breakdown and what it shows.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from typing import Dict, List

import click

from .separate import _mpirun_argv

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "latency_worker.py")


def _launch(np_: int, side: str, calls: int) -> Dict:
    env = dict(os.environ)
    argv = _mpirun_argv(np_, [sys.executable, WORKER, "--side", side, "--calls", str(calls)], env)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    for line in proc.stdout.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    raise click.ClickException(f"the {side} job failed (status {proc.returncode}):\n{proc.stdout[-2000:]}\n"
                               f"{proc.stderr[-2000:]}")


def _spread(values: List[float]) -> str:
    return f"{statistics.median(values):.1f} us [{min(values):.1f}-{max(values):.1f}]"


@click.command()
@click.option("--np", "np_", type=click.IntRange(min=2), default=2, show_default=True)
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--calls", type=click.IntRange(min=10), default=3000, show_default=True, help="calls per job")
@click.option("--tf", "with_tf", is_flag=True, help="also time the call from a tf.function beside TensorFlow's floor")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def command(np_: int, rounds: int, calls: int, with_tf: bool, as_json: bool) -> None:
    sides = ["blinkflow", "mpi"] + (["tf"] if with_tf else [])
    runs: Dict[str, List[Dict]] = {side: [] for side in sides}
    for r in range(rounds):
        for side in sides[r % len(sides):] + sides[:r % len(sides)]:  # rotate who goes first
            runs[side].append(_launch(np_, side, calls))
    if as_json:
        click.echo(json.dumps({"np": np_, "rounds": rounds, "calls": calls, "runs": runs}))
        return
    ours = [run["median_us"] for run in runs["blinkflow"]]
    theirs = [run["median_us"] for run in runs["mpi"]]
    click.echo(f"1-float all-reduce, {np_} ranks, {rounds} rounds of {calls} calls (median of per-job medians, "
               f"[min-max])")
    click.echo(f"  blinkflow from numpy: {_spread(ours)}")
    click.echo(f"  MPI_Allreduce:        {_spread(theirs)}")
    if with_tf:
        for key in ("tf_function_allreduce", "tf_function_numpy_function", "tf_function_add"):
            click.echo(f"  {key}: {_spread([run[key] for run in runs['tf']])}")
    # the breakdown of the round whose plain median was the median one
    middle = sorted(runs["blinkflow"], key=lambda run: run["median_us"])[len(ours) // 2]["stamped"]
    click.echo(f"where a call's time goes (rank 0, the median round; {middle['on_route']} of {middle['calls']} "
               f"stamped calls took this route, {middle['total_us']:.1f} us stamped):")
    for hop in middle["hops"]:
        click.echo(f"  {hop['us']:7.1f} us  {hop['from']:>10} -> {hop['to']:<10} {hop['what']}")
