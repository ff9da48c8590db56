"""Identical hosts are planned once: a host's network up to relabelling, and the packing found
for the first host of a shape carried to every other host of that shape.

A cluster is mostly copies of one machine. Number each host's allocated devices by their position
in the allocation, name its own nodes without their ``<host>/`` prefix (the names ``join_hosts``
and discovery give), and keep every other node's id: two hosts whose networks (:mod:`.network`)
are then the same capacitated graph are isomorphic by exactly that relabelling. An isomorphism
carries a packing of spanning trees to a packing with the same rate and optimum, so the packing
of one host serves all of its shape, moved by :func:`relabel`. Hosts whose names do not follow
the convention, or whose networks differ, simply get their own packing.
"""
from __future__ import annotations

from typing import Callable, Dict, Hashable, List, Sequence, Tuple

from ..topology.model import Topology
from .network import Network
from .single import PackedPlan

Move = Callable[[Hashable], Hashable]


def hosts_in_order(topology: Topology, devices: Sequence[int]) -> Dict[str, List[int]]:
    """Each host's devices in rank order; hosts in the order of their first device."""
    per_host: Dict[str, List[int]] = {}
    for d in devices:
        per_host.setdefault(topology.node(d).host, []).append(d)
    return per_host


def identical_hosts(topology: Topology, devices: Sequence[int]) -> bool:
    """Whether every host holding ``devices`` is the same machine with the same allocation: its
    links (all kinds, capacities and latencies, to its own nodes and to shared ones such as the
    network switch) equal under the relabelling, so exchanging two hosts maps the topology and
    the allocation onto themselves."""
    signatures = set()
    for host, devs in hosts_in_order(topology, devices).items():
        own, allocated = topology.nodes_on_host(host), set(devs)
        idle = {n.id: i for i, n in enumerate(x for x in own if x.is_compute and x.id not in allocated)}
        label = _labeller(host, devs)

        def name(node):
            return ("idle", idle[node]) if node in idle else label(node)
        signatures.add(frozenset((name(l.src), name(l.dst), l.kind, l.count, l.gbps, l.latency_us)
                                 for n in own for l in (*topology.out_links(n.id), *topology.in_links(n.id))))
        if len(signatures) > 1:
            return False
    return True


def shape(net: Network, host: str) -> Hashable:
    """The network of ``host`` with its devices numbered and its own nodes unprefixed."""
    label = _labeller(host, net.devices)
    arcs = frozenset((label(u), label(v), c) for (u, v), c in net.capacity.items())
    return (len(net.devices), net.channel, net.kinds, arcs)


def _labeller(host: str, devices: Sequence[int]) -> Move:
    position = {d: i for i, d in enumerate(devices)}
    prefix = host + "/"

    def label(node):
        if node in position:
            return ("device", position[node])
        if isinstance(node, str) and node.startswith(prefix):
            return ("own", node[len(prefix):])
        return ("shared", node)
    return label


def mover(src_host: str, src_devices: Sequence[int], dst_host: str, dst_devices: Sequence[int]) -> Move:
    """The relabelling from one host's nodes to another's: devices by position, ``src/x`` to
    ``dst/x``, shared nodes (the network switch) kept."""
    devices = dict(zip(src_devices, dst_devices))
    prefix = src_host + "/"

    def move(node):
        if node in devices:
            return devices[node]
        if isinstance(node, str) and node.startswith(prefix):
            return dst_host + "/" + node[len(prefix):]
        return node
    return move


def relabel(packed: PackedPlan, move: Move) -> PackedPlan:
    """``packed`` with every node renamed by ``move`` (an isomorphism of the networks)."""
    trees = [(f, move(root), tuple((move(a), move(b)) for a, b in arcs)) for f, root, arcs in packed.trees]
    paths = {(move(a), move(b)): tuple(move(n) for n in path) for (a, b), path in packed.paths.items()}
    return PackedPlan(trees, paths, packed.rate, packed.optimal, packed.algorithm, packed.channel)


class PackingMemo:
    """Packings per host shape: computed for the first host of a shape, relabelled for the rest.

    ``what`` names the packing asked for beyond the network (the collective, a root's position),
    so one memo serves every packing of a plan.
    """

    def __init__(self) -> None:
        self._first: Dict[Hashable, Tuple[str, Tuple[int, ...], PackedPlan]] = {}

    def packing(self, net: Network, host: str, what: Hashable, compute: Callable[[], PackedPlan]) -> PackedPlan:
        key = (what, shape(net, host))
        first = self._first.get(key)
        if first is None:
            packed = compute()
            self._first[key] = (host, tuple(net.devices), packed)
            return packed
        src_host, src_devices, packed = first
        return relabel(packed, mover(src_host, src_devices, host, net.devices))
