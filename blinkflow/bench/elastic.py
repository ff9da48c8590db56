"""``python -m blinkflow.bench elastic``: how long an elastic job stops for a reset.

For each job size N it runs two jobs under ``blinkrun`` (workers: :mod:`.elastic_worker`, a 1 MiB
all-reduce per step under ``blinkflow.elastic.run``, a commit after each):

- **loss**: N ranks (``--min-np N-1``); the highest rank SIGKILLs itself; the figure is from the
  kill to the end of the survivors' first step on the re-formed job;
- **gain**: N-1 ranks (``--max-np N``), a discovery script printing a slots file; rank 0 adds a
  slot to the file; the figure is from then to the end of the first step of the job with the new
  rank: discovery's poll (1 s), rank 0's check of the hosts file (1 s), the next commit, the new
  process's start (Python, blinkflow, MPI) and the join.

Both also give the reset alone (``Reset.seconds`` on rank 0: re-forming the runtime, with its
new plan). Wall-clock seconds of one machine's clock, so the ranks' times compare.
"""
from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

import click

WORKER = "blinkflow.bench.elastic_worker"
STEPS_BEFORE = 10


def _blinkrun(args: List[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "blinkflow.launcher", *args], capture_output=True, text=True,
                          timeout=timeout)


def _figures(done: subprocess.CompletedProcess) -> Optional[Dict[str, float]]:
    event = re.search(r"^\[\d+\]<stdout>: EVENT (\S+)$", done.stdout, re.M)
    first = re.search(r"^\[0\]<stdout>: FIRST (\S+) size (\d+) reset (\S+)$", done.stdout, re.M)
    if done.returncode != 0 or event is None or first is None:
        return None
    return {"seconds": float(first.group(1)) - float(event.group(1)), "size": int(first.group(2)),
            "reset": float(first.group(3))}


def run_one(mode: str, ranks: int, timeout: float) -> Optional[Dict[str, float]]:
    """One job; its figures, or None when it failed (its output then goes to stderr)."""
    with tempfile.TemporaryDirectory(prefix="blinkflow-bench-elastic-") as tmp:
        slots = os.path.join(tmp, "slots")
        start = ranks if mode == "loss" else ranks - 1
        with open(slots, "w") as f:
            f.write(f"localhost:{start}\n")
        discover = os.path.join(tmp, "discover.sh")
        with open(discover, "w") as f:
            f.write(f"#!/bin/sh\ncat {slots}\n")
        os.chmod(discover, os.stat(discover).st_mode | stat.S_IEXEC)
        bounds = ["--min-np", str(ranks - 1)] if mode == "loss" else ["--max-np", str(ranks)]
        done = _blinkrun(["-np", str(start), *bounds, "--host-discovery-script", discover, "python", "-m", WORKER,
                          mode, slots, str(STEPS_BEFORE)], timeout)
    figures = _figures(done)
    if figures is None:
        click.echo(f"{mode} at {ranks} ranks failed (status {done.returncode}):\n{done.stdout[-2000:]}\n"
                   f"{done.stderr[-2000:]}", err=True)
    return figures


@click.command()
@click.option("--ranks", default="2,3,4", show_default=True, help="job sizes N, comma-separated")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True, help="jobs per size and mode")
@click.option("--timeout", type=float, default=300.0, show_default=True, help="seconds per job")
def command(ranks: str, repeat: int, timeout: float) -> None:
    sizes = [int(n) for n in ranks.split(",")]
    if any(n < 2 for n in sizes):
        raise click.BadParameter("every job size must be at least 2 (one rank is lost or gained)", param_hint="--ranks")
    click.echo("| ranks | kill -> survivors' first step, s (reset) | new slot -> first step with the new rank, s (reset) |")
    click.echo("|---:|---|---|")
    for n in sizes:
        cells = []
        for mode in ("loss", "gain"):
            runs = [run_one(mode, n, timeout) for _ in range(repeat)]
            cells.append(", ".join("failed" if r is None else f"{r['seconds']:.2f} ({r['reset']:.2f})" for r in runs))
        click.echo(f"| {n} -> {n - 1} / {n - 1} -> {n} | {cells[0]} | {cells[1]} |")
