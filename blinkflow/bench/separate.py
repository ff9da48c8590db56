"""``python -m blinkflow.bench separate``: blinkflow's all-reduce and MPI's, each timed in its own
job, launch after launch in turn, and optionally several blinkflow trees alternated the same way.

``bench allreduce`` rotates blinkflow and MPI call by call inside one job, so both see the same
machine load; but there MPI runs in a process where blinkflow's background thread is alive, which
slows MPI's calls and flatters blinkflow's ratio. Here MPI runs in jobs where blinkflow never
started. A round launches every tree's blinkflow job and one MPI job (in a rotating order), each
through mpirun, each printing the median of its repetitions (:mod:`.timing_worker`); the report
gives per case the median over rounds, the spread, and the ratios.

``--tree NAME=PATH`` (repeatable) times the blinkflow found at ``PATH`` (put first on
PYTHONPATH) under ``NAME``: e.g. ``--tree new=. --tree old=/tmp/old`` compares this checkout
with an older one (a ``git worktree``) in one run. Without it, the installed blinkflow.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from typing import Dict, List, Tuple

import click

from ..sizes import SIZE_HELP, ByteSize, format_size

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "timing_worker.py")


def _mpirun_argv(np_: int, command: List[str], environ: Dict[str, str]) -> List[str]:
    """The launcher's mpirun argv, starting ``command`` itself rather than blinkrun's rank wrapper:
    an older tree under test may not have this launcher."""
    from blinkflow.errors import ConfigError
    from blinkflow.launcher.job.mpi_impl import detect
    from blinkflow.launcher.job.mpirun_argv import LaunchSpec, build_mpirun_argv
    from blinkflow.launcher.commands.run import local_cores

    try:
        impl = detect()
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    spec = LaunchSpec(np=np_, command=tuple(command), wrapped=False)
    return build_mpirun_argv(impl, spec, python=sys.executable, environ=environ,
                             is_root=hasattr(os, "geteuid") and os.geteuid() == 0, local_cores=local_cores())


def _launch(np_: int, side: str, sizes: str, pythonpath: str = "") -> Dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(([os.path.abspath(pythonpath)] if pythonpath else [])
                                        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    argv = _mpirun_argv(np_, [sys.executable, WORKER, "--side", side, "--sizes", sizes], env)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    for line in proc.stdout.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    raise click.ClickException(f"the {side} job failed (status {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def _case_name(case: str) -> str:
    return "200 x 16KiB" if case == "small" else format_size(int(case))


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--np", "np_", default=2, show_default=True, type=click.IntRange(1))
@click.option("--rounds", default=5, show_default=True, type=click.IntRange(1))
@click.option("--sizes", "sizes_b", type=ByteSize(many=True), default="16MiB,64MiB", show_default=True,
              help=f"per-rank buffer sizes ({SIZE_HELP})")
@click.option("--tree", "trees", multiple=True, help="NAME=PATH of a blinkflow checkout to time (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def command(np_: int, rounds: int, sizes_b: List[int], trees: Tuple[str, ...], as_json: bool) -> None:
    size_arg = ",".join(str(nbytes) for nbytes in sizes_b)
    named = [tuple(t.split("=", 1)) for t in trees] or [("blinkflow", "")]
    sides: List[Tuple[str, str, str]] = [(name, "blinkflow", path) for name, path in named] + [("MPI", "mpi", "")]
    runs: Dict[str, List[Dict]] = {name: [] for name, _, _ in sides}
    for r in range(rounds):
        for name, side, path in sides[r % len(sides):] + sides[:r % len(sides)]:
            runs[name].append(_launch(np_, side, size_arg, path)["cases"])
    cases = list(runs["MPI"][0])
    report = {"ranks": np_, "rounds": rounds, "cases": {}}
    for case in cases:
        row = {}
        for name in runs:
            values = [run[case] for run in runs[name]]
            row[name] = {"median_s": statistics.median(values), "min_s": min(values), "max_s": max(values)}
        for name, _, _ in sides[:-1]:
            row[name]["vs_mpi"] = row["MPI"]["median_s"] / row[name]["median_s"]
        report["cases"][_case_name(case)] = row
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"all-reduce float32, {np_} ranks, each side in its own job, {rounds} rounds (median of per-job medians, "
               "[min-max]); MPI_Allreduce out of place")
    for case, row in report["cases"].items():
        parts = [f"{name} {v['median_s'] * 1e3:.3f} ms [{v['min_s'] * 1e3:.3f}-{v['max_s'] * 1e3:.3f}]"
                 + (f" {v['vs_mpi']:.2f}x" if "vs_mpi" in v else "") for name, v in row.items()]
        click.echo(f"{case:>11}: " + "; ".join(parts))
