"""``python -m blinkflow.bench tf-peers``: the synthetic benchmark's step under blinkflow and under
TensorFlow's own ``MultiWorkerMirroredStrategy``, on this machine, in alternating jobs.

Each side runs in processes of its own (:mod:`.tf_step`): blinkflow through blinkrun, the
strategy as ``--np`` localhost workers that find each other through ``TF_CONFIG`` (RING
collectives over gRPC). A round launches both, in an order that alternates from round to round
so that both see the same load; the report gives each side's total images/sec per round and
the median over rounds, their ratio, blinkflow's communication efficiency (its step time
without / with the all-reduce, alternated inside its own job) and its ceiling, the efficiency
of the same step with the ranks meeting once per step but no gradient all-reduced
(:mod:`.tf_step`).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
from typing import Dict, List, Optional

import click

WORKER = [sys.executable, "-m", "blinkflow.bench.tf_step"]
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
SIDES = {"blinkflow": "blinkflow", "mwms": "MultiWorkerMirroredStrategy"}


def _result(stdout: str, what: str, status: int, stderr: str) -> Dict:
    for line in stdout.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    raise click.ClickException(f"the {what} job failed (status {status}):\n{stdout[-2000:]}\n{stderr[-2000:]}")


def run_blinkflow(np_: int, step_args: List[str], timeout: float, env: Optional[Dict[str, str]] = None) -> Dict:
    """One blinkrun job of the blinkflow side; ``env`` adds settings for its ranks."""
    beside = os.path.join(os.path.dirname(sys.executable), "blinkrun")  # this interpreter's own
    blinkrun = beside if os.path.exists(beside) else shutil.which("blinkrun")
    proc = subprocess.run([blinkrun, "-np", str(np_)] + WORKER + ["--side", "blinkflow"] + step_args,
                          env=dict(os.environ, **QUIET, **(env or {})), capture_output=True, text=True,
                          timeout=timeout)
    return _result(proc.stdout, "blinkflow", proc.returncode, proc.stderr)


def _free_ports(n: int) -> List[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def run_mwms(np_: int, step_args: List[str], timeout: float) -> Dict:
    workers = [f"localhost:{port}" for port in _free_ports(np_)]
    procs = []
    for index in range(np_):
        config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = dict(os.environ, TF_CONFIG=json.dumps(config), **QUIET)
        procs.append(subprocess.Popen(WORKER + ["--side", "mwms"] + step_args, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=timeout))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    stdout = "".join(out for out, _ in outputs)
    return _result(stdout, "MultiWorkerMirroredStrategy", max(p.returncode or 0 for p in procs),
                   "".join(err[-1000:] for _, err in outputs))


#: The synthetic step's options (:mod:`.tf_step`), for every suite that launches it.
_STEP_OPTIONS = [
    click.option("--model", default="MobileNetV2", show_default=True),
    click.option("--img-size", default=64, show_default=True, type=int),
    click.option("--batch-size", default=16, show_default=True, type=int, help="per worker"),
    click.option("--num-iters", default=5, show_default=True, type=int),
    click.option("--num-batches-per-iter", default=5, show_default=True, type=int),
    click.option("--num-threads", default=1, show_default=True, type=int, help="TF threads per worker"),
]


def step_options(command_fn):
    """Add the synthetic step's options to a click command (they reach it as keyword arguments)."""
    for option in reversed(_STEP_OPTIONS):
        command_fn = option(command_fn)
    return command_fn


def step_arguments(model, img_size, batch_size, num_iters, num_batches_per_iter, num_threads) -> List[str]:
    """The :mod:`.tf_step` command line of those options."""
    return ["--model", model, "--img-size", str(img_size), "--batch-size", str(batch_size),
            "--num-iters", str(num_iters), "--num-batches-per-iter", str(num_batches_per_iter),
            "--num-threads", str(num_threads)]


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--np", "np_", default=2, show_default=True, type=click.IntRange(1), help="workers per side")
@click.option("--rounds", default=5, show_default=True, type=click.IntRange(1))
@step_options
@click.option("--timeout", default=900.0, show_default=True, help="seconds per job")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def command(np_, rounds, model, img_size, batch_size, num_iters, num_batches_per_iter, num_threads, timeout,
            as_json) -> None:
    step_args = step_arguments(model, img_size, batch_size, num_iters, num_batches_per_iter, num_threads)
    runners = [("blinkflow", lambda n, args, t: run_blinkflow(n, ["--local-baseline"] + args, t)), ("mwms", run_mwms)]
    runs: Dict[str, List[Dict]] = {side: [] for side, _ in runners}
    for r in range(rounds):
        for side, run in runners[r % 2:] + runners[:r % 2]:
            runs[side].append(run(np_, step_args, timeout))
    report = {"model": model, "img_size": img_size, "batch_size": batch_size, "workers": np_,
              "threads": num_threads, "rounds": rounds, "sides": {}}
    for side, results in runs.items():
        totals = [res["total_img_sec"] for res in results]
        report["sides"][side] = {"total_img_sec": totals, "median": statistics.median(totals)}
    efficiencies = [res["communication_efficiency"] for res in runs["blinkflow"]]
    report["blinkflow_communication_efficiency"] = {"per_round": efficiencies,
                                                    "median": statistics.median(efficiencies)}
    ceilings = [res["sync_efficiency"] for res in runs["blinkflow"]]
    report["sync_efficiency"] = {"per_round": ceilings, "median": statistics.median(ceilings)}
    report["speedup"] = report["sides"]["blinkflow"]["median"] / report["sides"]["mwms"]["median"]
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"{model} {img_size}x{img_size}, batch {batch_size} per worker, {np_} workers per side, "
               f"{num_threads} thread(s) each; {rounds} rounds, the sides alternating, each in its own processes")
    click.echo(f"{'side':<30} {'median img/sec':>15}   per round (total img/sec)")
    for side, row in report["sides"].items():
        click.echo(f"{SIDES[side]:<30} {row['median']:>15.1f}   " + "  ".join(f"{v:.1f}" for v in row["total_img_sec"]))
    click.echo(f"blinkflow / MultiWorkerMirroredStrategy: {report['speedup']:.2f}x")
    click.echo("blinkflow communication efficiency (step without / with the all-reduce): median "
               f"{100 * report['blinkflow_communication_efficiency']['median']:.1f}%  ("
               + "  ".join(f"{100 * e:.1f}%" for e in efficiencies) + ")")
    click.echo("the ranks meeting once per step without the all-reduce (the ceiling): median "
               f"{100 * report['sync_efficiency']['median']:.1f}%  ("
               + "  ".join(f"{100 * e:.1f}%" for e in ceilings) + ")")
