"""``python -m blinkflow.bench cross-host``: blinkflow's all-reduce against ``MPI_Allreduce``
across hosts, on a cluster built for the run (network namespaces joined by veths, each host with
its own sshd: :mod:`.cluster`; needs root, and installs ``iproute2``, ``openssh`` and
``nftables`` with apt-get where they are missing), with and without a rate limit on the links.

For every setting (ranks per host, link rate) the bench first sets the limit (a ``tbf`` queue on
every host's link, so every link is capped both ways) and checks that it took effect: one TCP
stream between the first two hosts, each way, must carry at most ``LIMIT_SLACK`` times the limit
and at least half of it, or the bench stops (its figures would not be what they claim). Then,
round after round, blinkflow's job and MPI's job run in turn (the order rotating), each launched
by ``mpirun -H bfa:k,bfb:k,...`` from ``bfa`` and timing its own calls (:mod:`.timing_worker`:
per size the median over repetitions of the slowest rank's seconds; MPI in a job where blinkflow
never started). The report gives per size the medians over rounds, ``MPI/blinkflow`` (above 1:
blinkflow is faster) and the link bound beside both.

``--slow-pair F`` (three hosts or more) caps the first two hosts' pair at the rate / F both ways
(an ``htb`` class per slow destination inside each host's cap: :meth:`.cluster.Cluster.limit_pairs`),
checks that pair and a fast one, and runs blinkflow twice: planned on the links it measures at
start-up (the default, :mod:`blinkflow.runtime.link_probe`) and on the nominal rates
(``BLINKFLOW_LINK_PROBE=0``); the report adds ``nominal/measured``. No link bound is printed then:
the uniform links' bound still holds but is far below what a slow pair allows, so a share of it
would say little.

The link bound: an all-reduce of S bytes over h hosts moves at least 2(h-1)/h * S bytes over each
host's link each way (a reduce-scatter then an all-gather across hosts, the least any algorithm
can send when each host holds a full input), so at B bits/s it takes at least
2(h-1)/h * 8S/B seconds. Without a limit the measured rate stands for B (the veth's rate is the
machine's copy speed, shared with the ranks: the bound is then only indicative).
"""
from __future__ import annotations

import json
import os
import re
import statistics
import sys
from typing import Dict, List, Optional, Tuple

import click

from ..sizes import SIZE_HELP, ByteSize, format_size

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "timing_worker.py")
#: A limit took effect when one TCP stream carries at most this much more than it (tbf's burst
#: lets a little over through at the start) and at least half of it.
LIMIT_SLACK = 1.15
#: Seconds each check of a link's rate transfers for.
MEASURE_S = 1.0
_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}


def parse_rate(text: str) -> Optional[float]:
    """``"1gbit"``, ``"500Mbit"``, ``"2.5g"`` -> bits per second; ``"none"`` -> None."""
    text = text.strip().lower()
    if text in ("none", "0", "off"):
        return None
    found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmg]?)(?:bit|b|bps)?(?:/s)?", text)
    if found is None or float(found.group(1)) <= 0:
        raise click.BadParameter(f"{text!r} is not a rate: say e.g. 1gbit, 500mbit or none")
    return float(found.group(1)) * _UNITS[found.group(2)]


def format_rate(bits_per_s: Optional[float]) -> str:
    if bits_per_s is None:
        return "no limit"
    return f"{bits_per_s / 1e9:.3g} Gbit/s" if bits_per_s >= 1e9 else f"{bits_per_s / 1e6:.3g} Mbit/s"


def link_bound_s(nbytes: int, hosts: int, bits_per_s: float) -> float:
    """The least time an all-reduce of ``nbytes`` over ``hosts`` hosts takes on links of
    ``bits_per_s`` each way (see the module docstring)."""
    return 2 * (hosts - 1) / hosts * nbytes * 8 / bits_per_s


def check_limit(limit: Optional[float], measured: Dict[str, float]) -> None:
    """Raise ClickException unless every measured direction is within the limit's bounds."""
    if limit is None:
        return
    for way, rate in measured.items():
        if not limit / 2 <= rate <= limit * LIMIT_SLACK:
            raise click.ClickException(
                f"the {format_rate(limit)} limit did not take effect: {way} carried {format_rate(rate)} "
                f"(allowed {format_rate(limit / 2)} to {format_rate(limit * LIMIT_SLACK)}); is the tbf "
                "queueing discipline (sch_tbf) in this kernel?")


def _launch(cluster, per_host: int, side: str, sizes: str, reps: int,
            extra_env: Optional[Dict[str, str]] = None) -> Dict[str, float]:
    from blinkflow.launcher.job.hosts import Host
    from blinkflow.launcher.job.mpi_impl import detect
    from blinkflow.launcher.job.mpirun_argv import LaunchSpec, build_mpirun_argv
    from blinkflow.launcher.commands.run import local_cores

    env = cluster.env(extra_env)
    command = (sys.executable, WORKER, "--side", side, "--sizes", sizes, "--reps", str(reps), "--small-reps", "0")
    spec = LaunchSpec(np=per_host * len(cluster.hosts), command=command, wrapped=False,
                      hosts=tuple(Host(host, per_host) for host in cluster.hosts))
    argv = build_mpirun_argv(detect(), spec, python=sys.executable, environ=env, is_root=os.geteuid() == 0,
                             local_cores=local_cores())
    proc = cluster.run_on(cluster.hosts[0], argv, env=env, timeout=1800)
    for line in proc.stdout.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])["cases"]
    raise click.ClickException(f"the {side} job on {per_host} rank(s) per host failed (status {proc.returncode}):\n"
                               f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def measure_setting(cluster, per_host: int, limit: Optional[float], sizes: List[int], rounds: int,
                    reps: int, slow_factor: Optional[float] = None) -> Dict:
    """One setting's figures (see the module docstring)."""
    a, b = cluster.hosts[:2]
    ways = [(a, b), (b, a)]
    if slow_factor:
        slow = {(a, b): limit / slow_factor, (b, a): limit / slow_factor}
        cluster.limit_pairs(limit, slow)
        c = cluster.hosts[2]
        ways += [(a, c), (c, b)]
    else:
        slow = {}
        cluster.limit(limit)
    measured = {f"{s}->{d}": cluster.measure(s, d, MEASURE_S) for s, d in ways}
    for (s, d) in ways:
        check_limit(slow.get((s, d), limit), {f"{s}->{d}": measured[f"{s}->{d}"]})
    rate = limit if limit is not None else min(measured.values())
    size_arg = ",".join(map(str, sizes))
    # (name, worker side, extra environment); with a slow pair blinkflow also runs on the
    # nominal rates, so the report shows what planning on the measured ones is worth.
    sides: List[Tuple[str, str, Dict[str, str]]] = [("blinkflow", "blinkflow", {}), ("MPI", "mpi", {})]
    if slow:
        sides.insert(1, ("blinkflow nominal", "blinkflow", {"BLINKFLOW_LINK_PROBE": "0"}))
    runs: Dict[str, List[Dict[str, float]]] = {name: [] for name, _, _ in sides}
    for r in range(rounds):
        k = r % len(sides)
        for name, side, env in sides[k:] + sides[:k]:
            runs[name].append(_launch(cluster, per_host, side, size_arg, reps, env))
    cases = {}
    for nbytes in sizes:
        # With a slow pair the uniform links' bound holds but is far from reachable: no share of it.
        bound = None if slow else link_bound_s(nbytes, len(cluster.hosts), rate)
        row = {"bound_s": bound}
        for name in runs:
            values = [run[str(nbytes)] for run in runs[name]]
            median = statistics.median(values)
            row[name] = {"median_s": median, "min_s": min(values), "max_s": max(values),
                         "of_bound": None if bound is None else bound / median}
        row["mpi_over_blinkflow"] = row["MPI"]["median_s"] / row["blinkflow"]["median_s"]
        if slow:
            row["nominal_over_measured"] = row["blinkflow nominal"]["median_s"] / row["blinkflow"]["median_s"]
        cases[format_size(nbytes)] = row
    return {"hosts": len(cluster.hosts), "ranks_per_host": per_host, "limit_bits_per_s": limit,
            "slow_pair": [a, b, slow_factor] if slow else None,
            "measured_bits_per_s": measured, "cases": cases}


def _print(setting: Dict) -> None:
    measured = ", ".join(f"{way} {format_rate(rate)}" for way, rate in setting["measured_bits_per_s"].items())
    slow = setting["slow_pair"]
    pair = f", {slow[0]}<->{slow[1]} at 1/{slow[2]:g} of it" if slow else ""
    click.echo(f"{setting['hosts']} hosts x {setting['ranks_per_host']} rank(s), "
               f"{format_rate(setting['limit_bits_per_s'])}{pair} (one TCP stream: {measured})")
    for case, row in setting["cases"].items():
        parts = []
        for name in [n for n in ("blinkflow", "blinkflow nominal", "MPI") if n in row]:
            r = row[name]
            share = "" if r["of_bound"] is None else f" {r['of_bound']:4.0%} of bound"
            parts.append(f"{name} {r['median_s'] * 1e3:8.1f} ms [{r['min_s'] * 1e3:.1f}-{r['max_s'] * 1e3:.1f}]{share}")
        ratios = f"MPI/blinkflow {row['mpi_over_blinkflow']:.2f}x"
        if "nominal_over_measured" in row:
            ratios += f"; nominal/measured {row['nominal_over_measured']:.2f}x"
        bound = "" if row["bound_s"] is None else f"; link bound {row['bound_s'] * 1e3:.1f} ms"
        click.echo(f"  {case:>8}: " + "; ".join(parts) + f"; {ratios}{bound}")


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--hosts", "nhosts", default=2, show_default=True, type=click.IntRange(2, 8))
@click.option("--per-host", default="1,2", show_default=True, help="ranks per host, comma-separated")
@click.option("--rates", default="1gbit,none", show_default=True,
              help="link limits, comma-separated (e.g. 1gbit, 500mbit; none: no limit)")
@click.option("--sizes", "sizes_b", type=ByteSize(many=True), default="16MiB,64MiB", show_default=True,
              help=f"per-rank buffer sizes ({SIZE_HELP})")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1))
@click.option("--reps", default=5, show_default=True, type=click.IntRange(1), help="calls per size in each job")
@click.option("--slow-pair", "slow_factor", type=click.FloatRange(1, min_open=True), default=None,
              help="the first two hosts' pair runs at the rate divided by this, both ways (needs --hosts 3 or "
                   "more and a rate); blinkflow then also runs planned on nominal rates")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def command(nhosts: int, per_host: str, rates: str, sizes_b: List[int], rounds: int, reps: int,
            slow_factor: Optional[float], as_json: bool) -> None:
    from .cluster import Cluster, ClusterUnavailable

    counts = [int(k) for k in per_host.split(",") if k.strip()]
    if not counts or min(counts) < 1:
        raise click.BadParameter(f"{per_host!r}: say ranks per host as positive integers, e.g. 1,2",
                                 param_hint="--per-host")
    limits = [parse_rate(r) for r in rates.split(",") if r.strip()]
    if slow_factor and (nhosts < 3 or None in limits):
        raise click.BadParameter("a slow pair needs --hosts 3 or more (trees route around it through a third) "
                                 "and a rate for every setting (e.g. --rates 1gbit)", param_hint="--slow-pair")
    try:
        cluster = Cluster(nhosts).start()
    except ClusterUnavailable as e:
        raise click.ClickException(f"no cluster on this machine: {e} (the cross-host bench needs root)") from None
    settings = []
    try:
        for limit in limits:
            for k in counts:
                settings.append(measure_setting(cluster, k, limit, sizes_b, rounds, reps, slow_factor))
                if not as_json:
                    _print(settings[-1])
    finally:
        cluster.stop()
    if as_json:
        click.echo(json.dumps({"rounds": rounds, "reps": reps, "settings": settings}, indent=2))
