"""``python -m blinkflow.bench scale``: Blink's three phases against NCCL's ring and NCCL's double
binary tree across many hosts, per message size, in the simulator.

For one multi-host topology (default ``64xdgx1-v100``, 512 GPUs) and sizes from 1 KiB up by 4x,
simulates the all-reduce three ways with MIAD-tuned chunks: blinkflow's three-phase plan, NCCL's
rings (one per NIC; over many identical hosts read off the same ring on 2 and 4 hosts,
:mod:`blinkflow.sim.extrapolate`) and NCCL's double binary tree. ``--step-budget`` bounds the steps
of one simulated call: too small, and a plan of many trees runs one chunk per tree, unpipelined.
Prints a Markdown table (the machine, the date and the wall time of the run above it) and draws
time against size with ``--png``.
"""
from __future__ import annotations

import json
import platform
import time
from typing import Dict, List, Sequence

import click

from ..sim.chunking import STEP_BUDGET
from ..sim.compare import sweep_sizes
from ..sizes import SIZE_HELP, ByteSize, format_size

DEFAULT_TOPOLOGY = "64xdgx1-v100"
ALGORITHMS = ("blinkflow", "nccl-ring", "nccl-tree")


def measure(topology, plan, size_bytes: int, step_budget: int) -> Dict:
    from ..sim.api import simulate_plan
    from ..sim.baselines import nccl_double_tree, nccl_ring, simulate_baseline
    from ..sim.extrapolate import simulate_at_scale

    devices = plan.devices
    row = {"size_bytes": size_bytes}
    start = time.perf_counter()
    row["blinkflow"] = simulate_plan(plan, topology, size_bytes, step_budget=step_budget).result.seconds
    ring, tuned = simulate_at_scale(nccl_ring(topology, devices, "allreduce"), topology, size_bytes,
                                    step_budget=step_budget)
    row["nccl-ring"], row["ring_method"] = tuned.result.seconds, ring.name
    row["nccl-tree"] = simulate_baseline(nccl_double_tree(topology, devices), topology, size_bytes,
                                         step_budget=step_budget).result.seconds
    row["best"] = min(ALGORITHMS, key=lambda a: row[a])
    row["sim_seconds"] = time.perf_counter() - start
    return row


def markdown(rows: Sequence[Dict], spec: str, plan, step_budget: int, wall: float) -> str:
    lines = [f"# {spec}: {len(plan.devices)} GPUs, all-reduce; plan rate {plan.rate_gbps:.2f} GB/s; "
             f"step budget {step_budget}",
             f"# machine: {platform.node()} {platform.processor() or platform.machine()}, python "
             f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             f"the run took {wall:.0f} s",
             "| size | blinkflow (three-phase) µs | NCCL ring µs | NCCL tree µs | fastest | blinkflow vs best NCCL |",
             "|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        nccl = min(r["nccl-ring"], r["nccl-tree"])
        lines.append(f"| {format_size(r['size_bytes'])} | {r['blinkflow'] * 1e6:.1f} | {r['nccl-ring'] * 1e6:.1f} | "
                     f"{r['nccl-tree'] * 1e6:.1f} | {r['best']} | {nccl / r['blinkflow']:.2f}x |")
    return "\n".join(lines)


def plot(rows: Sequence[Dict], spec: str, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["size_bytes"] for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    for name, style in zip(ALGORITHMS, ("o-", "s--", "^:")):
        top.loglog(sizes, [r[name] for r in rows], style, label=name)
    top.set_ylabel("simulated time (s)")
    top.set_title(f"all-reduce on {spec}")
    top.grid(True, which="both", alpha=0.3)
    top.legend()
    bottom.semilogx(sizes, [min(r["nccl-ring"], r["nccl-tree"]) / r["blinkflow"] for r in rows], "o-")
    bottom.axhline(1.0, color="k", lw=0.8)
    bottom.set_ylabel("speedup vs best NCCL")
    bottom.set_xlabel("buffer size (bytes)")
    bottom.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


@click.command(help="Three-phase all-reduce against NCCL's ring and tree across many hosts, per size.")
@click.option("--topology", "spec", default=DEFAULT_TOPOLOGY, show_default=True, help="A multi-host preset.")
@click.option("--size", "largest", type=ByteSize(), default="1GiB", show_default=True,
              help=f"Largest buffer ({SIZE_HELP}).")
@click.option("--smallest", type=ByteSize(), default="1KiB", show_default=True, help="Smallest buffer.")
@click.option("--step-budget", default=STEP_BUDGET, show_default=True, help="Most steps of one simulated call.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per size.")
@click.option("--png", type=click.Path(dir_okay=False), help="Plot time and speedup against size.")
def command(spec, largest, smallest, step_budget, as_json, png):
    from ..planner import make_plan
    from ..topology.resolve import resolve_topology

    start = time.perf_counter()
    topology = resolve_topology(spec, "--topology")
    plan = make_plan(topology, "allreduce")
    rows: List[Dict] = []
    for size in sweep_sizes(largest, smallest):
        rows.append(measure(topology, plan, size, step_budget))
        if as_json:
            click.echo(json.dumps(rows[-1]))
    if not as_json:
        click.echo(markdown(rows, spec, plan, step_budget, time.perf_counter() - start))
    if png:
        plot(rows, spec, png)
