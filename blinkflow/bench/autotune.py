"""``python -m blinkflow.bench autotune``: the synthetic benchmark's training step with the
settings the autotuner finds against the defaults, in alternating jobs.

Each round launches two blinkrun jobs of :mod:`.tf_step` (a keras.applications model, random
images, ``DistributedGradientTape``), in an order that alternates from round to round: one with
the default settings, one with ``BLINKFLOW_AUTOTUNE=1``. The tuned job's warm-up batches are
long enough for the search to finish (``--tune-steps``), so its timed batches run with the
setting it kept; the report gives both jobs' total images/sec per round, their medians and what
the search kept (from its log file).
"""
from __future__ import annotations

import csv
import os
import statistics
import tempfile
from typing import Dict, List

import click

from .tf_peers import run_blinkflow, step_arguments, step_options


def kept(log_file: str) -> Dict:
    """The search's last row (``best``) and how many samples it scored."""
    with open(log_file) as f:
        rows = list(csv.DictReader(f))
    best = [r for r in rows if r["phase"] == "best"]
    if not best:
        raise click.ClickException(f"the search did not finish within the warm-up ({len(rows)} samples logged in "
                                   f"{log_file}); raise --tune-steps")
    return {"fusion_threshold": int(best[-1]["fusion_threshold_bytes"]),
            "cycle_time_ms": float(best[-1]["cycle_time_ms"]), "samples": sum(r["phase"] == "sample" for r in rows)}


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--np", "np_", default=2, show_default=True, type=click.IntRange(1), help="ranks per job")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1))
@step_options
@click.option("--tune-steps", default=300, show_default=True, type=int,
              help="warm-up batches of both jobs; the search must finish within them")
@click.option("--timeout", default=1200.0, show_default=True, help="seconds per job")
def command(np_, rounds, model, img_size, batch_size, num_iters, num_batches_per_iter, num_threads, tune_steps,
            timeout) -> None:
    step_args = step_arguments(model, img_size, batch_size, num_iters, num_batches_per_iter, num_threads) \
        + ["--num-warmup-batches", str(tune_steps)]
    totals: Dict[str, List[float]] = {"defaults": [], "autotune": []}
    found = []
    with tempfile.TemporaryDirectory(prefix="blinkflow-autotune-") as tmp:
        for r in range(rounds):
            for side in (["defaults", "autotune"] if r % 2 == 0 else ["autotune", "defaults"]):
                env = {}
                if side == "autotune":
                    log = os.path.join(tmp, f"round{r}.csv")
                    env = {"BLINKFLOW_AUTOTUNE": "1", "BLINKFLOW_AUTOTUNE_LOG_FILE": log}
                totals[side].append(run_blinkflow(np_, step_args, timeout, env)["total_img_sec"])
                if side == "autotune":
                    found.append(kept(log))
    click.echo(f"{model} {img_size}x{img_size}, batch {batch_size} per rank, {np_} ranks, {num_threads} thread(s) "
               f"each; {rounds} rounds, the two jobs alternating; {tune_steps} warm-up batches each")
    for side, values in totals.items():
        click.echo(f"{side:<10} median {statistics.median(values):8.1f} img/sec   per round: "
                   + "  ".join(f"{v:.1f}" for v in values))
    click.echo("kept by the search, per round: " + "; ".join(
        f"fusion {f['fusion_threshold'] / (1 << 20):.1f} MiB, cycle {f['cycle_time_ms']:g} ms ({f['samples']} samples)"
        for f in found))
