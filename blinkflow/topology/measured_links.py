"""Host-to-host rates measured at start-up, and the network they describe (pure, no MPI).

Blink (MLSys 2020) packs trees on the links' nominal rates, and so do NCCL's rings: the NIC's
speed is taken to be what every pair of hosts gets. Clouds hand out machines whose pairs
differ (another tenant's traffic, a degraded NIC, a different rack); a ring is as slow as its
slowest pair, while trees can carry less over a slow pair and more over the others, if the
planner knows. :mod:`blinkflow.runtime.link_probe` measures each pair of hosts, one pair per
host at a time; this module agrees the figures and turns them into a topology.

The model. A pair ``a -> b`` measured alone carried ``p(a, b)``; a host cannot send more than
the best of its pairs (its egress ``e(a) = max_b p(a, b)``) nor receive more than the best of
its pairs into it (its ingress ``g(b)``). The network switch of the nominal topology becomes a
mesh of NIC-to-NIC links whose capacities ``c(a, b)`` are the **max-min fair** share of the
pairs under those three limits (water-filling: every pair's share rises together; a pair stops
at ``p(a, b)``, and every pair of a host stops when the host's egress or ingress is full). Any
set of rates the mesh allows the real network allows too, and on identical hosts the mesh is
the nominal switch split evenly (``e / (H - 1)`` per pair), the same graph the planner's switch
splitting gives. With one pair at a quarter of the others' rate among three hosts, the mesh
holds the optimum all-gather (each host receives 3/4 of its NIC: 1/4 from the slow peer, 1/2
from the fast one), which the plan's relays through the third host then reach.

Measured figures are noisy: pairs within :data:`SAME_RATE` of the fastest are taken to run at
the fastest's rate (and when all are, the nominal topology is kept unchanged), and the slower
ones are rounded to two significant digits, so that jitter does not change the plan.
"""
from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Dict, Iterable, List, Mapping, Sequence, Tuple

from ..errors import TopologyError
from .model import Link, Topology

Pair = Tuple[str, str]
#: Pairs measured at this share of the fastest pair or more count as equally fast.
SAME_RATE = 0.8


@dataclasses.dataclass(frozen=True)
class LinkRates:
    """The agreed rate of every ordered pair of hosts, GB/s (1e9 B/s)."""

    hosts: Tuple[str, ...]
    gbps: Tuple[Tuple[Pair, float], ...]

    @classmethod
    def of(cls, hosts: Sequence[str], gbps: Mapping[Pair, float]) -> "LinkRates":
        missing = [f"{a}->{b}" for a in hosts for b in hosts if a != b and (a, b) not in gbps]
        if missing:
            raise TopologyError(f"no measured rate for {', '.join(missing)}", "link probe")
        bad = [f"{a}->{b} = {v!r}" for (a, b), v in gbps.items() if not (isinstance(v, (int, float)) and v > 0
                                                                          and math.isfinite(v))]
        if bad:
            raise TopologyError(f"measured rates must be finite and > 0: {', '.join(bad)}", "link probe")
        return cls(tuple(hosts), tuple(sorted((pair, float(v)) for pair, v in gbps.items()
                                              if pair[0] in hosts and pair[1] in hosts)))

    def as_dict(self) -> Dict[Pair, float]:
        return dict(self.gbps)

    def uniform(self) -> bool:
        """Whether every pair is within :data:`SAME_RATE` of the fastest."""
        values = [v for _, v in self.gbps]
        return not values or min(values) >= SAME_RATE * max(values)

    def verdict(self) -> str:
        """One line: whether plans route by these figures."""
        if self.uniform():
            return f"every pair within {SAME_RATE:.0%} of the fastest: plans keep the nominal network"
        return "pairs differ: plans of jobs on these hosts route by these figures (BLINKFLOW_LINK_PROBE=0: nominal)"

    def table(self) -> str:
        """The figures as a host x host table (row: from, column: to), GB/s."""
        width = max(8, *(len(h) for h in self.hosts))
        rates = self.as_dict()
        lines = ["from \\ to".ljust(width) + "".join(h.rjust(width + 2) for h in self.hosts)]
        for a in self.hosts:
            cells = ["-" if a == b else f"{rates[(a, b)]:.3g}" for b in self.hosts]
            lines.append(a.ljust(width) + "".join(c.rjust(width + 2) for c in cells))
        return "\n".join(lines)


def agree(reports: Iterable[Mapping[Pair, float]]) -> Dict[Pair, float]:
    """One figure per ordered pair from every rank's reports: both ends of a transfer time it,
    each in a way that can only err slow (the sender until the receiver's acknowledgement is
    back, the receiver from telling the sender to go until the data is in), and the agreed
    figure is the lowest report, so one end that measured wrongly cannot make a pair look
    faster than its other end saw it. Every rank computes this from the same gathered
    reports, so every rank plans with the same figures."""
    agreed: Dict[Pair, float] = {}
    for report in reports:
        for pair, value in report.items():
            agreed[pair] = min(value, agreed.get(pair, math.inf))
    return agreed


def fair_shares(pairs: Mapping[Pair, float]) -> Dict[Pair, Fraction]:
    """Max-min fair capacities of the pairs under ``p(a, b)``, each host's egress (its best
    outgoing pair) and ingress (its best incoming pair); see the module docstring. Exact
    (fractions), so identical inputs give identical meshes on every rank."""
    p = {pair: _exact(v) for pair, v in pairs.items()}
    egress: Dict[str, Fraction] = {}
    ingress: Dict[str, Fraction] = {}
    for (a, b), v in p.items():
        egress[a] = max(egress.get(a, Fraction(0)), v)
        ingress[b] = max(ingress.get(b, Fraction(0)), v)
    share = {pair: Fraction(0) for pair in p}
    active = set(p)
    while active:
        # The largest common raise before some pair, or some host's egress or ingress, is full.
        steps = [p[pair] - share[pair] for pair in active]
        for host, cap in egress.items():
            n = sum(1 for (a, _) in active if a == host)
            if n:
                steps.append((cap - sum(v for (a, _), v in share.items() if a == host)) / n)
        for host, cap in ingress.items():
            n = sum(1 for (_, b) in active if b == host)
            if n:
                steps.append((cap - sum(v for (_, b), v in share.items() if b == host)) / n)
        step = min(steps)
        for pair in active:
            share[pair] += step
        full_out = {h for h, cap in egress.items() if sum(v for (a, _), v in share.items() if a == h) >= cap}
        full_in = {h for h, cap in ingress.items() if sum(v for (_, b), v in share.items() if b == h) >= cap}
        active = {pair for pair in active if share[pair] < p[pair] and pair[0] not in full_out
                  and pair[1] not in full_in}
    return share


def with_measured_links(topology: Topology, rates: LinkRates) -> Topology:
    """``topology`` with its network switch replaced by a mesh of NIC-to-NIC links at the
    measured pairs' fair shares; unchanged when every pair ran at about the same rate
    (:meth:`LinkRates.uniform`). Needs one NIC per host joined to one network switch (every
    CPU job, and GPU hosts with one NIC); raises TopologyError otherwise."""
    if rates.uniform():
        return topology
    switches = [n for n in topology.nodes if n.kind == "switch" and n.detail == "net"]
    if len(switches) != 1:
        raise TopologyError(f"measured links need the hosts joined by one network switch; {topology.name!r} has "
                            f"{len(switches)}", "link probe")
    switch = switches[0].id
    nic_of: Dict[str, object] = {}
    for link in topology.in_links(switch):
        host = topology.node(link.src).host
        if host in nic_of:
            raise TopologyError(f"host {host} has several NICs; measured links are planned for hosts with one",
                                "link probe")
        nic_of[host] = link.src
    if set(nic_of) != set(rates.hosts):
        raise TopologyError(f"the rates were measured among hosts {sorted(rates.hosts)} but the topology's network "
                            f"joins {sorted(nic_of)}", "link probe")
    fastest = max(v for _, v in rates.gbps)
    shares = fair_shares({pair: fastest if v >= SAME_RATE * fastest else _rounded(v) for pair, v in rates.gbps})
    nodes = [n for n in topology.nodes if n.id != switch]
    links: List[Link] = [l for l in topology.links if switch not in (l.src, l.dst)]
    links += [Link(nic_of[a], nic_of[b], "net", 1, float(c)) for (a, b), c in sorted(shares.items())]
    return Topology.build(topology.name + "+measured", nodes, links, "link probe")


def _rounded(value: float) -> float:
    """Two significant digits: jitter below that does not change the plan."""
    return float(f"{value:.2g}")


def _exact(value: float) -> Fraction:
    return Fraction(value).limit_denominator(1 << 20)


