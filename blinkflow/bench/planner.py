"""``python -m blinkflow.bench planner``: how long ``make_plan`` takes, per preset and size.

For every preset and allocation size (the first k devices, so runs are comparable) and every
collective, plans ``--repeat`` times from scratch and reports the median wall time, with the rate
reached, the optimum and the NCCL-style ring for reference (computed once, outside the timing:
``make_plan`` leaves the baseline out unless asked, as at a job's start-up).
"""
from __future__ import annotations

import json
import platform
import re
import statistics
import time

import click

DEFAULT_PRESETS = ("dgx1-v100", "dgx1-p100", "dgx-a100", "hgx-h100", "dgx2", "pcie-8gpu", "cpu-host:8",
                   "2xdgx1-v100")
COLLECTIVES = ("broadcast", "allgather", "allreduce")


def _sizes(n: int):
    sizes = sorted({2, 3, 4, n // 2, n} | ({6, 8} if n >= 8 else set()))
    return [k for k in sizes if 2 <= k <= n]


def measure(preset: str, size: int, collective: str, repeat: int) -> dict:
    from ..planner import make_plan
    from ..planner.ring import ring_gbps
    from ..topology.presets import get_preset

    topology = get_preset(preset)
    devices = list(topology.compute_ids)[:size]
    times = []
    plan = None
    for _ in range(repeat):
        start = time.perf_counter()
        plan = make_plan(topology, collective, devices)
        times.append(time.perf_counter() - start)
    return {"preset": preset, "devices": size, "collective": collective,
            "median_ms": statistics.median(times) * 1e3, "rate_gbps": plan.rate_gbps,
            "optimal_gbps": plan.optimal_gbps, "ring_gbps": ring_gbps(topology, devices, collective),
            "trees": len(plan.trees) or sum(len(p.trees) for p in plan.intra), "algorithm": plan.algorithm}


@click.command(help="Planning time (median of --repeat runs) per preset, allocation size and collective; "
               "--scale: against the number of hosts.")
@click.option("--preset", "presets", multiple=True, help="Presets to measure (default: all single-host "
              "presets, cpu-host:8 and 2xdgx1-v100; with --scale: dgx1-v100, hgx-h100, dgx-a100).")
@click.option("--repeat", default=5, show_default=True, help="Runs per case; the median is reported.")
@click.option("--full-only", is_flag=True, help="Only the whole machine, not the smaller allocations.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per case instead of the table.")
@click.option("--scale", is_flag=True, help="Nx<preset> for N = 2, 4, ... --max-hosts: wall and CPU time.")
@click.option("--max-hosts", default=128, show_default=True, type=click.IntRange(2, 128),
              help="With --scale: the largest N.")
@click.option("--collective", "collectives", multiple=True, type=click.Choice(COLLECTIVES),
              help="With --scale: collectives to plan (default: allreduce, broadcast).")
@click.option("--png", type=click.Path(dir_okay=False), help="With --scale: a log-log plot of time against GPUs.")
def command(presets, repeat, full_only, as_json, scale, max_hosts, collectives, png):
    from ..topology.presets import get_preset

    if scale:
        _scale(presets, collectives, max_hosts, repeat, as_json, png)
        return
    rows = []
    for preset in presets or DEFAULT_PRESETS:
        n = len(get_preset(preset).compute_ids)
        multi = re.match(r"\d+x", preset) is not None
        sizes = [n] if full_only or multi else _sizes(n)
        for size in sizes:
            for collective in (("allreduce",) if multi else COLLECTIVES):
                row = measure(preset, size, collective, repeat)
                rows.append(row)
                if as_json:
                    click.echo(json.dumps(row))
    if as_json:
        return
    click.echo(f"# machine: {platform.node()} {platform.processor() or platform.machine()}, "
               f"python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    click.echo("| preset | devices | collective | median ms | rate GB/s | optimal | ring | trees | algorithm |")
    click.echo("|---|---:|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        click.echo(f"| {r['preset']} | {r['devices']} | {r['collective']} | {r['median_ms']:.1f} | "
                   f"{r['rate_gbps']:.2f} | {r['optimal_gbps']:.2f} | {r['ring_gbps']:.2f} | {r['trees']} | "
                   f"{r['algorithm']} |")


def _scale(presets, collectives, max_hosts, repeat, as_json, png):
    from .planner_scale import SCALE_COLLECTIVES, SCALE_PRESETS, plot_scale, scale_rows, scale_table

    rows = []
    for row in scale_rows(presets or SCALE_PRESETS, collectives or SCALE_COLLECTIVES, max_hosts, repeat):
        rows.append(row)
        if as_json:
            click.echo(json.dumps(row))
    if not as_json:
        click.echo(scale_table(rows, repeat))
    if png:
        try:
            plot_scale(rows, png)
        except ImportError:
            raise click.UsageError("--png needs matplotlib (pip install 'blinkflow[plot]')") from None
