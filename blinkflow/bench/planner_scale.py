"""``python -m blinkflow.bench planner --scale``: planning time against cluster size.

For ``Nx<preset>`` with N = 2, 4, ..., up to ``--max-hosts``, plans each collective ``--repeat``
times, each on a freshly built topology (so its lookup indexes are built inside the timing, as at
a job's start-up), and reports the median wall and CPU time (``time.process_time``: what this
process spent, which a busy shared machine does not inflate), the rate and the optimum. The
NCCL ring baseline is not part of planning (``make_plan`` leaves it out) and is not timed.
"""
from __future__ import annotations

import platform
import statistics
import time
from typing import Dict, Iterable, List, Sequence

SCALE_PRESETS = ("dgx1-v100", "hgx-h100", "dgx-a100")
SCALE_COLLECTIVES = ("allreduce", "broadcast")
#: The planning-time targets drawn on the plot: (GPUs, seconds) — 256 GPUs in 1 s, 1,024 in 5 s.
TARGETS = ((256, 1.0), (1024, 5.0))


def host_counts(max_hosts: int) -> List[int]:
    """2, 4, 8, ... up to ``max_hosts`` (and ``max_hosts`` itself)."""
    counts, n = [], 2
    while n < max_hosts:
        counts.append(n)
        n *= 2
    return counts + [max_hosts] if max_hosts >= 2 else []


def measure_scale(preset: str, hosts: int, collective: str, repeat: int) -> Dict:
    from ..planner import make_plan
    from ..topology.presets import get_preset

    walls, cpus, plan = [], [], None
    for _ in range(repeat):
        topology = get_preset(f"{hosts}x{preset}")
        wall, cpu = time.perf_counter(), time.process_time()
        plan = make_plan(topology, collective)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"preset": f"{hosts}x{preset}", "hosts": hosts, "gpus": len(plan.devices), "collective": collective,
            "wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus),
            "rate_gbps": plan.rate_gbps, "optimal_gbps": plan.optimal_gbps, "algorithm": plan.algorithm}


def scale_rows(presets: Sequence[str], collectives: Sequence[str], max_hosts: int, repeat: int) -> Iterable[Dict]:
    for preset in presets:
        for hosts in host_counts(max_hosts):
            for collective in collectives:
                yield measure_scale(preset, hosts, collective, repeat)


def scale_table(rows: Sequence[Dict], repeat: int) -> str:
    lines = [f"# machine: {platform.node()} {platform.processor() or platform.machine()}, "
             f"python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             f"median of {repeat}",
             "| topology | GPUs | collective | wall s | CPU s | rate GB/s | optimal | algorithm |",
             "|---|---:|---|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['preset']} | {r['gpus']} | {r['collective']} | {r['wall_s']:.3f} | {r['cpu_s']:.3f} | "
                     f"{r['rate_gbps']:.2f} | {r['optimal_gbps']:.2f} | {r['algorithm']} |")
    return "\n".join(lines)


def plot_scale(rows: Sequence[Dict], path: str) -> None:
    """Log-log plot of planning time (CPU and wall) against GPUs, one line per topology and
    collective, with the issue's targets marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    series: Dict[tuple, List[Dict]] = {}
    for r in rows:
        series.setdefault((r["preset"].split("x", 1)[1], r["collective"]), []).append(r)
    for (preset, collective), points in sorted(series.items()):
        points.sort(key=lambda r: r["gpus"])
        line, = ax.loglog([r["gpus"] for r in points], [r["cpu_s"] for r in points], "o-",
                          label=f"{preset} {collective}")
        ax.loglog([r["gpus"] for r in points], [r["wall_s"] for r in points], ":", color=line.get_color())
    for gpus, seconds in TARGETS:
        ax.plot([gpus], [seconds], "k*", markersize=12)
        ax.annotate(f"target {seconds:g} s", (gpus, seconds), textcoords="offset points", xytext=(-40, 8))
    ax.set_xlabel("GPUs (N hosts x 8)")
    ax.set_ylabel("make_plan time (s): CPU solid, wall dotted")
    ax.set_title("Planning time against cluster size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
