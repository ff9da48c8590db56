"""The hardware graph: compute devices, switches, NICs and the directed links between them.

A :class:`Topology` is plain data. Compute devices (GPUs, or CPU ranks) have integer ids — a
GPU's id is the index ``nvidia-smi`` shows — and every other node (NVSwitch, PCIe switch, CPU
socket, NIC, network switch) has a string id. Links are directed: a physical link appears once
per direction, each with its own capacity in GB/s (1 GB = 1e9 bytes) so asymmetric fabrics can
be described. ``count`` is the number of bonded physical links (``NV2`` = 2 NVLinks) and
``gbps`` the capacity of the whole bundle in that direction.

Only the topology package, the planner and the simulator read this structure; it imports
nothing heavier than the standard library.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from ..errors import TopologyError

NodeId = Union[int, str]

#: Node kinds. ``gpu`` and ``cpu`` (a CPU rank acting as a compute device) are compute nodes;
#: the rest only forward data.
COMPUTE_KINDS = ("gpu", "cpu")
NODE_KINDS = COMPUTE_KINDS + ("switch", "socket", "nic")
#: Switch flavours, in ``Node.detail``: an NVSwitch fabric, a PCIe switch, a network switch.
SWITCH_DETAILS = ("nvswitch", "pcie", "net")
LINK_KINDS = ("nvlink", "pcie", "qpi", "nvswitch", "net", "shm")
SCHEMA_VERSION = 1
#: Lookup indexes a Topology caches on itself (see ``Topology.__getstate__``).
_INDEXES = ("_node_index", "_link_index", "_out_index", "_in_index", "_host_index")


@dataclasses.dataclass(frozen=True)
class Node:
    """One vertex of the hardware graph."""

    id: NodeId
    kind: str
    host: str = "localhost"
    detail: Optional[str] = None
    """Free-form refinement: the switch flavour, a GPU model, a NIC name."""

    @property
    def is_compute(self) -> bool:
        return self.kind in COMPUTE_KINDS


@dataclasses.dataclass(frozen=True)
class Link:
    """One direction of a (possibly bonded) physical link."""

    src: NodeId
    dst: NodeId
    kind: str
    count: int
    gbps: float
    """Capacity of the whole bundle in this direction, GB/s (1e9 B/s)."""
    latency_us: float = 0.0
    """One-way latency in microseconds (0 = the simulator's default for the kind)."""

    @property
    def key(self) -> Tuple[NodeId, NodeId]:
        return (self.src, self.dst)


@dataclasses.dataclass(frozen=True)
class Topology:
    """A validated hardware graph. Build it with :meth:`build`, which checks everything."""

    name: str
    nodes: Tuple[Node, ...]
    links: Tuple[Link, ...]

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def build(cls, name: str, nodes: Iterable[Node], links: Iterable[Link], where: Optional[str] = None) -> "Topology":
        """Validate and return a Topology; parallel links between the same pair are merged.

        ``where`` names the source (file, preset) in error messages.
        """
        nodes = tuple(nodes)
        merged: Dict[Tuple[NodeId, NodeId], Link] = {}
        for link in links:
            old = merged.get(link.key)
            if old is None:
                merged[link.key] = link
            elif old.kind != link.kind:
                raise TopologyError(
                    f"two links {link.src}->{link.dst} of different kinds ({old.kind}, {link.kind}); "
                    "describe one kind per pair", where)
            else:
                merged[link.key] = dataclasses.replace(old, count=old.count + link.count, gbps=old.gbps + link.gbps)
        # Validate in the order given, so field indexes in errors match the input; then sort.
        cls(name=name, nodes=nodes, links=tuple(merged.values())).validate(where)
        return cls(name=name, nodes=_sorted_nodes(nodes), links=tuple(sorted(merged.values(), key=_link_order)))

    def validate(self, where: Optional[str] = None) -> None:
        """Raise :class:`TopologyError` naming the offending field if the graph is malformed."""
        seen = {}
        for i, node in enumerate(self.nodes):
            field = f"nodes[{i}]"
            if node.kind not in NODE_KINDS:
                raise TopologyError(f"{field}.kind is {node.kind!r}; expected one of {', '.join(NODE_KINDS)}", where)
            if node.is_compute and not (isinstance(node.id, int) and not isinstance(node.id, bool)):
                raise TopologyError(f"{field}.id is {node.id!r}; compute devices need integer ids", where)
            if not node.is_compute and not isinstance(node.id, str):
                raise TopologyError(f"{field}.id is {node.id!r}; {node.kind} nodes need string ids", where)
            if isinstance(node.id, int) and node.id < 0:
                raise TopologyError(f"{field}.id is {node.id}; device ids are >= 0", where)
            if node.kind == "switch" and node.detail not in SWITCH_DETAILS:
                raise TopologyError(f"{field}.detail is {node.detail!r}; a switch is one of {', '.join(SWITCH_DETAILS)}", where)
            if node.id in seen:
                raise TopologyError(f"{field}.id {node.id!r} appears twice", where)
            seen[node.id] = node
        if not any(n.is_compute for n in self.nodes):
            raise TopologyError("no compute devices (gpu or cpu nodes)", where)
        for i, link in enumerate(self.links):
            field = f"links[{i}] ({link.src}->{link.dst})"
            if link.src not in seen:
                raise TopologyError(f"{field}.src {link.src!r} is not a node", where)
            if link.dst not in seen:
                raise TopologyError(f"{field}.dst {link.dst!r} is not a node", where)
            if link.src == link.dst:
                raise TopologyError(f"{field} is a self-loop", where)
            if link.kind not in LINK_KINDS:
                raise TopologyError(f"{field}.kind is {link.kind!r}; expected one of {', '.join(LINK_KINDS)}", where)
            if not isinstance(link.count, int) or link.count < 1:
                raise TopologyError(f"{field}.count is {link.count!r}; expected an integer >= 1", where)
            if not (link.gbps > 0) or link.gbps != link.gbps or link.gbps == float("inf"):
                raise TopologyError(f"{field}.gbps is {link.gbps!r}; expected a positive finite number", where)
            if link.latency_us < 0:
                raise TopologyError(f"{field}.latency_us is negative", where)

    # ---- queries -------------------------------------------------------------------------
    # A Topology is immutable, so its lookups are answered from indexes built on first use: a
    # cluster of 128 hosts has ~10,000 links and the planner asks for links and nodes by id
    # hundreds of thousands of times.
    @functools.cached_property
    def _node_index(self) -> Dict[NodeId, Node]:
        return {n.id: n for n in self.nodes}

    @functools.cached_property
    def _link_index(self) -> Dict[Tuple[NodeId, NodeId], Link]:
        return {l.key: l for l in self.links}

    @functools.cached_property
    def _in_index(self) -> Dict[NodeId, Tuple[Link, ...]]:
        return _grouped(self.links, lambda link: link.dst)

    @functools.cached_property
    def _host_index(self) -> Dict[str, Tuple[Node, ...]]:
        return _grouped(self.nodes, lambda node: node.host)

    @functools.cached_property
    def _out_index(self) -> Dict[NodeId, Tuple[Link, ...]]:
        return _grouped(self.links, lambda link: link.src)

    def __getstate__(self) -> dict:
        # The indexes are rebuilt on first use; a pickled topology (sent between ranks) is data.
        return {k: v for k, v in self.__dict__.items() if k not in _INDEXES}

    def node(self, node_id: NodeId) -> Node:
        try:
            return self._node_index[node_id]
        except (KeyError, TypeError):  # TypeError: an unhashable id is not a node either
            raise KeyError(node_id) from None

    @property
    def compute_ids(self) -> Tuple[int, ...]:
        """Integer ids of the compute devices, sorted."""
        return tuple(n.id for n in self.nodes if n.is_compute)

    @property
    def gpu_ids(self) -> Tuple[int, ...]:
        return tuple(n.id for n in self.nodes if n.kind == "gpu")

    @property
    def hosts(self) -> Tuple[str, ...]:
        """Host names in order of first appearance among the compute devices."""
        return hosts_by_first_appearance(node.host for node in self.nodes if node.is_compute)

    def compute_on_host(self, host: str) -> Tuple[int, ...]:
        return tuple(n.id for n in self._host_index.get(host, ()) if n.is_compute)

    def nodes_on_host(self, host: str) -> Tuple[Node, ...]:
        """Every node whose ``host`` is ``host`` (devices, switches, sockets, NICs), in order."""
        return self._host_index.get(host, ())

    def link(self, src: NodeId, dst: NodeId) -> Optional[Link]:
        return self._link_index.get((src, dst))

    def capacity(self, src: NodeId, dst: NodeId) -> float:
        """GB/s from src to dst over a direct link, 0 when there is none."""
        link = self._link_index.get((src, dst))
        return link.gbps if link else 0.0

    def out_links(self, node_id: NodeId) -> Iterator[Link]:
        return iter(self._out_index.get(node_id, ()))

    def in_links(self, node_id: NodeId) -> Iterator[Link]:
        return iter(self._in_index.get(node_id, ()))

    def neighbors(self, node_id: NodeId) -> List[NodeId]:
        return [link.dst for link in self._out_index.get(node_id, ())]

    def links_of_kind(self, *kinds: str) -> Tuple[Link, ...]:
        return tuple(link for link in self.links if link.kind in kinds)

    # ---- subsetting -------------------------------------------------------------------------
    def subset(self, devices: Sequence[int], where: str = "--gpus") -> "Topology":
        """Keep only the listed compute devices (every non-compute node stays if still linked).

        Devices that are not in the topology raise :class:`TopologyError` naming ``where``.
        Links touching a dropped device go with it; switches, sockets and NICs that lose every
        link are dropped too, so the result describes exactly the allocation.
        """
        wanted = list(devices)
        if not wanted:
            raise TopologyError("the device list is empty", where)
        if len(set(wanted)) != len(wanted):
            raise TopologyError(f"device list {wanted} repeats a device", where)
        present = set(self.compute_ids)
        missing = [d for d in wanted if d not in present]
        if missing:
            raise TopologyError(
                f"device {missing[0]} is not in topology {self.name!r} (devices: {_fmt_ids(self.compute_ids)})", where)
        keep = set(wanted)
        nodes = [n for n in self.nodes if (n.id in keep) or not n.is_compute]
        node_ids = {n.id for n in nodes}
        links = [l for l in self.links if l.src in node_ids and l.dst in node_ids]
        # Drop forwarding nodes (switches, sockets, NICs) that became dead ends: a node whose
        # links all go to one neighbour can carry no traffic between devices. Repeat, because
        # removing one can strand the next along a chain.
        while True:
            dead = {n.id for n in nodes if not n.is_compute and _is_leaf(n.id, links)}
            if not dead:
                break
            nodes = [n for n in nodes if n.id not in dead]
            links = [l for l in links if l.src not in dead and l.dst not in dead]
        label = ",".join(str(d) for d in sorted(keep))
        return Topology.build(f"{self.name}[{label}]", nodes, links, where)

    # ---- serialisation ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The JSON shape of ``blinkrun topo --json`` (docs/topology.md; plus optional
        ``detail`` and ``latency_us``)."""
        nodes = []
        for n in self.nodes:
            entry = {"id": n.id, "kind": n.kind, "host": n.host}
            if n.detail is not None:
                entry["detail"] = n.detail
            nodes.append(entry)
        links = []
        for l in self.links:
            entry = {"src": l.src, "dst": l.dst, "kind": l.kind, "count": l.count, "gbps": l.gbps}
            if l.latency_us:
                entry["latency_us"] = l.latency_us
            links.append(entry)
        return {"schema": SCHEMA_VERSION, "name": self.name, "nodes": nodes, "links": links}

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def digest(self) -> str:
        """A short stable hash of the graph (ranks compare it at init)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def hosts_by_first_appearance(hosts: Iterable[str]) -> Tuple[str, ...]:
    """Each host name of ``hosts`` once, in the order it first appears: how hosts are numbered
    everywhere (host 0 holds the first device, or rank 0)."""
    return tuple(dict.fromkeys(hosts))


def _grouped(items, key) -> dict:
    """``items`` grouped by ``key(item)``, each group a tuple in the items' order."""
    out: Dict = {}
    for item in items:
        out.setdefault(key(item), []).append(item)
    return {k: tuple(group) for k, group in out.items()}


def _is_leaf(node_id: NodeId, links: Sequence[Link]) -> bool:
    """A forwarding node whose links all go to one neighbour is a dead end for traffic."""
    peers = {l.dst for l in links if l.src == node_id} | {l.src for l in links if l.dst == node_id}
    return len(peers) <= 1


def _node_order(node: Node):
    # Compute devices first by integer id, then the rest by kind and name.
    return (0, node.id, "") if node.is_compute else (1, NODE_KINDS.index(node.kind), str(node.id))


def _sorted_nodes(nodes: Sequence[Node]) -> Tuple[Node, ...]:
    return tuple(sorted(nodes, key=_node_order))


def link_order(link: Link):
    """The order of ``Topology.links``: by source, then destination; devices before named nodes."""
    return (_id_order(link.src), _id_order(link.dst))


_link_order = link_order


def _id_order(node_id: NodeId):
    return (0, node_id, "") if isinstance(node_id, int) else (1, 0, node_id)


def _fmt_ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


def bidirectional(src: NodeId, dst: NodeId, kind: str, count: int, gbps_per_link: float,
                  latency_us: float = 0.0) -> List[Link]:
    """Both directions of a symmetric bundle of ``count`` links of ``gbps_per_link`` each."""
    gbps = count * gbps_per_link
    return [Link(src, dst, kind, count, gbps, latency_us), Link(dst, src, kind, count, gbps, latency_us)]
