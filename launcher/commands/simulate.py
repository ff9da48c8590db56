"""``blinkrun simulate``: blinkflow's plan against NCCL's algorithm in the same simulator.

    blinkrun simulate --topology dgx1-v100 --gpus 0,1,4 --collective allreduce --size 256MB
    blinkrun simulate --topology topo.json --collective broadcast --root 2 --size 1GB --json
    blinkrun simulate --topology dgx1-p100 --collective allreduce --size 1GB --sweep --png t.png
    blinkrun simulate --topology 64xdgx1-v100 --collective allreduce --size 1GB --sweep --step-budget 1000000

``--json`` prints the object docs/topology.md describes, with ``policy``: the
algorithm and chunk the call-shape policy picks for a job on that topology, why, and its predicted
seconds (null, "simulated": false, for an algorithm the simulator cannot model), and on GPUs
``policy.algorithms``: the runner's, the device executor's and (all-reduce) NCCL's predictions,
each with the chunk it really uses (projections: docs/cuda.md, "The cost model"); ``--sweep`` a table
over sizes from 1 KiB up to ``--size`` with the latency / bandwidth crossover; ``--png`` plots time
against size. Sizes are read by :mod:`blinkflow.sizes`: KB, MB, GB are powers of 1000, KiB, MiB,
GiB (or K, M, G) powers of 1024. Bad input exits 2 with one line.
"""
from __future__ import annotations

import json
from typing import List

import click

from blinkflow.planner.plan import COLLECTIVES
from blinkflow.sim.chunking import STEP_BUDGET
from blinkflow.sim.compare import Comparison, compare, compare_sizes, make_plan_for, sweep_sizes
from blinkflow.sim.policy_prediction import predict_all
from blinkflow.sizes import SIZE_HELP, format_size, parse_size
from blinkflow.topology.resolve import resolve_topology

from ..one_line import OneLineErrorCommand
from .topo import parse_gpus

@click.command(cls=OneLineErrorCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--topology", "topology_spec", required=True, metavar="PRESET|FILE",
              help="A preset (dgx1-v100, cpu-host:4, 2xdgx1-v100, ...) or a topology file.")
@click.option("--gpus", metavar="LIST", help="The participating devices, e.g. 0,1,4 (default: all).")
@click.option("--collective", required=True, type=click.Choice(COLLECTIVES), help="The collective to simulate.")
@click.option("--root", type=int, default=None, help="Root device of broadcast / reduce (default: the first).")
@click.option("--size", "size_text", default="256MB", show_default=True, help=f"Buffer size, e.g. 256MB or 1GiB ({SIZE_HELP}).")
@click.option("--elem-bytes", type=click.IntRange(1, 16), default=4, show_default=True, help="Bytes per element.")
@click.option("--chunk", "chunk_text", default=None, help="Fixed chunk size (default: tuned by MIAD).")
@click.option("--step-budget", type=click.IntRange(1000), default=STEP_BUDGET, show_default=True,
              help="Most steps one simulated call may have: MIAD starts from fewer, larger chunks when a "
                   "plan has many trees. Raise it for finer chunks on big clusters (slower).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (docs/topology.md).")
@click.option("--sweep", is_flag=True, help="Print a table over sizes from 1KiB up to --size.")
@click.option("--png", metavar="FILE", default=None, help="Plot time against size (needs matplotlib).")
def command(topology_spec, gpus, collective, root, size_text, elem_bytes, chunk_text, step_budget, as_json, sweep, png):
    """Simulate COLLECTIVE with blinkflow's plan and with NCCL's algorithm on a topology."""
    size = parse_size(size_text, "--size")
    chunk = parse_size(chunk_text, "--chunk") // elem_bytes if chunk_text else None
    if size < elem_bytes:
        raise click.UsageError(f"--size {size_text!r} is smaller than one element ({elem_bytes} bytes)")
    topology = resolve_topology(topology_spec, "--topology")
    devices = parse_gpus(gpus)
    if devices is not None:
        topology.subset(devices, where="--gpus")  # checks the list; the plan runs on the full graph
    options = dict(elem_bytes=elem_bytes, chunk_elems=max(1, chunk) if chunk else None, step_budget=step_budget)
    if not (sweep or png):
        plan = make_plan_for(topology, collective, devices, root)
        row = compare(topology, collective, size, devices, root, latency=False, plan=plan, **options)
        nccl = row.baseline_seconds if collective == "allreduce" else None  # the baseline is NCCL's rings
        chosen = predict_all(plan, topology, size, elem_bytes=elem_bytes, nccl_seconds=nccl)
        if as_json:
            click.echo(json.dumps(dict(row.to_json(), policy=chosen.to_json()), indent=2))
        else:
            click.echo(row.describe() + "\n" + chosen.describe())
        return
    rows = compare_sizes(topology, collective, sweep_sizes(size), devices, root, **options)
    if as_json:
        click.echo(json.dumps([r.to_json() for r in rows], indent=2))
    else:
        click.echo(format_sweep(rows))
    if png:
        plot(rows, png)


def format_sweep(rows: List[Comparison]) -> str:
    first = rows[0]
    lines = [f"{first.collective} on {first.topology} devices {','.join(map(str, first.devices))}: "
             f"blinkflow ({first.plan_algorithm}, plan rate {first.rate_gbps:.1f} GB/s) vs {first.baseline_name}",
             f"{'size':>8} {'blinkflow':>12} {'algbw':>8} {'baseline':>12} {'algbw':>8} {'speedup':>8}  regime"]
    for r in rows:
        regime = "latency" if r.size_bytes / (r.rate_gbps * 1e9) < r.latency_s else "bandwidth"
        lines.append(f"{format_size(r.size_bytes):>8} {r.seconds * 1e6:>10.1f}us {r.algbw_gbps:>8.2f} "
                     f"{r.baseline_seconds * 1e6:>10.1f}us {r.baseline_algbw_gbps:>8.2f} {r.speedup:>7.2f}x  {regime}")
    cross = first.latency_s * first.rate_gbps * 1e9
    lines.append(f"latency/bandwidth crossover ~ {format_size(cross)}: below it the fixed cost ({first.latency_s * 1e6:.1f} us, "
                 f"the smallest size's time) dominates, above it size / {first.rate_gbps:.1f} GB/s does")
    return "\n".join(lines)


def plot(rows: List[Comparison], path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise click.UsageError("--png needs matplotlib (pip install 'blinkflow[plot]')") from None
    sizes = [r.size_bytes for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(sizes, [r.seconds for r in rows], "o-", label=f"blinkflow ({rows[0].plan_algorithm})")
    ax.loglog(sizes, [r.baseline_seconds for r in rows], "s--", label=rows[0].baseline_name)
    ax.set_xlabel("buffer size (bytes)")
    ax.set_ylabel("simulated time (s)")
    ax.set_title(f"{rows[0].collective} on {rows[0].topology}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as e:
        raise click.UsageError(f"--png {path!r}: cannot write ({e.strerror})") from None
    finally:
        plt.close(fig)
