"""``python -m blinkflow.bench elastic-gain``: how long an elastic job takes from a host's
appearance to its first step with the new rank.

For each job size N it runs ``blinkrun -np N-1 --max-np N --host-discovery-script S`` on this
machine, S printing a slots file; the workers (:mod:`.elastic_gain_worker`) run float32
all-reduces, a commit after each, and rank 0 adds a slot to the file. Times from that moment
(the slowest path is rank 0's, which every rank waits for):

- *noticed*: rank 0's commit raised ``HostsUpdatedInterrupt`` (blinkrun's discovery poll, 1 s;
  rank 0's read of the hosts file, 1 s; the next commit);
- *new process*: the new rank's Python started (the spawn through ``mpirun``);
- *joined*: the reset returned on rank 0 (the new process imported blinkflow and started MPI,
  the groups merged, the runtime started on N ranks with a fresh plan), with the runtime's
  start alone (``Reset.seconds``) in brackets;
- *first step*: the first all-reduce with the new rank completed.
"""
from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import tempfile
from typing import Dict, Optional

import click

WORKER = "blinkflow.bench.elastic_gain_worker"
AFTER_STEPS = 10


def _time(pattern: str, text: str) -> Optional[re.Match]:
    return re.search(rf"^\[\d+\]<stdout>: {pattern}$", text, re.M)


def run_one(ranks: int, elements: int, timeout: float) -> Optional[Dict[str, float]]:
    """One job growing from ``ranks - 1`` to ``ranks``: its times (s after the slot appeared),
    or None when it failed (its output then goes to stderr)."""
    with tempfile.TemporaryDirectory(prefix="blinkflow-bench-elastic-") as tmp:
        slots = os.path.join(tmp, "slots")
        with open(slots, "w") as f:
            f.write(f"localhost:{ranks - 1}\n")
        discover = os.path.join(tmp, "discover.sh")
        with open(discover, "w") as f:
            f.write(f"#!/bin/sh\ncat {slots}\n")
        os.chmod(discover, os.stat(discover).st_mode | stat.S_IEXEC)
        done = subprocess.run([sys.executable, "-m", "blinkflow.launcher", "-np", str(ranks - 1), "--max-np", str(ranks),
                               "--host-discovery-script", discover, "python", "-m", WORKER, slots, str(AFTER_STEPS),
                               str(elements)], capture_output=True, text=True, timeout=timeout)
    found = {name: _time(f"{name} (\\S+)(?: (\\S+))?", done.stdout)
             for name in ("SLOT", "NOTICED", "STARTED", "JOINED", "FIRST")}
    if done.returncode != 0 or not all(found.values()):
        click.echo(f"{ranks - 1} -> {ranks} ranks failed (status {done.returncode}):\n{done.stdout[-2000:]}\n"
                   f"{done.stderr[-2000:]}", err=True)
        return None
    slot = float(found["SLOT"].group(1))
    figures = {name.lower(): float(m.group(1)) - slot for name, m in found.items() if name != "SLOT"}
    figures["reset"] = float(found["JOINED"].group(2))
    figures["size"] = float(found["FIRST"].group(2))
    return figures


@click.command()
@click.option("--ranks", default="2,3,4", show_default=True, help="job sizes N after the gain, comma-separated")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True, help="jobs per size")
@click.option("--elements", type=click.IntRange(min=1), default=1 << 16, show_default=True,
              help="float32 elements of each step's all-reduce")
@click.option("--timeout", type=float, default=300.0, show_default=True, help="seconds per job")
def command(ranks: str, repeat: int, elements: int, timeout: float) -> None:
    sizes = [int(n) for n in ranks.split(",")]
    if any(n < 2 for n in sizes):
        raise click.BadParameter("every job size must be at least 2 (it grows from N-1)", param_hint="--ranks")
    click.echo("| ranks | noticed (s) | new process (s) | joined (s) [runtime start] | first step (s) |")
    click.echo("|---|---|---|---|---|")
    for n in sizes:
        runs = [r for r in (run_one(n, elements, timeout) for _ in range(repeat)) if r is not None]
        if not runs:
            click.echo(f"| {n - 1} → {n} | failed | | | |")
            continue

        def cell(key: str) -> str:
            return " / ".join(f"{r[key]:.2f}" for r in runs)

        joined = " / ".join(f"{r['joined']:.2f} [{r['reset']:.2f}]" for r in runs)
        click.echo(f"| {n - 1} → {n} | {cell('noticed')} | {cell('started')} | {joined} | {cell('first')} |")
