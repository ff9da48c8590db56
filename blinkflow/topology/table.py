"""A device × device table of a Topology, in the spirit of ``nvidia-smi topo -m``.

Each cell says how data gets from the row's device to the column's device and how fast
(GB/s, one direction, the narrowest link on the way):

* ``NV2/50`` — a direct bundle of 2 NVLinks;
* ``NVS12/300`` — both devices on one NVSwitch, 12 links each;
* ``SHM/10`` — shared memory between two CPU ranks of one host;
* ``PIX``/``PXB``/``PHB``/``SYS``/``NET`` + ``/GB/s`` — the shortest path through PCIe and
  sockets, with nvidia-smi's meaning (one PCIe switch / several / a CPU socket / across
  sockets) plus ``NET`` for a path through the network;
* ``-`` — no path.
"""
from __future__ import annotations

from collections import deque
from typing import Dict, List, Optional, Tuple

from .model import Link, NodeId, Topology

LEGEND = """Legend:
  X         = Self
  NV#/B     = direct bonded set of # NVLinks, B GB/s per direction
  NVS#/B    = through an NVSwitch, # NVLinks per device, B GB/s per direction
  SHM/B     = shared memory between CPU ranks of one host
  PIX/B     = through one PCIe switch
  PXB/B     = through several PCIe switches, not through a CPU
  PHB/B     = through a CPU socket's host bridge
  SYS/B     = across CPU sockets (QPI/UPI)
  NET/B     = across the network, between hosts
  -         = no path"""


def format_table(topology: Topology) -> str:
    """The table, a summary of the forwarding nodes and the legend, ready to print."""
    devices = list(topology.compute_ids)
    labels = {d: _label(topology, d) for d in devices}
    rows: List[List[str]] = [[""] + [labels[d] for d in devices]]
    several_hosts = len(topology.hosts) > 1
    if several_hosts:
        rows[0].append("Host")
    for a in devices:
        row = [labels[a]] + ["X" if a == b else connection(topology, a, b) for b in devices]
        if several_hosts:
            row.append(topology.node(a).host)
        rows.append(row)
    width = max(len(cell) for row in rows for cell in row) + 2
    lines = [f"Topology {topology.name}: {len(devices)} devices on {len(topology.hosts)} host(s)", ""]
    lines += ["".join(cell.ljust(width) for cell in row).rstrip() for row in rows]
    lines += [""] + _forwarding_summary(topology) + [LEGEND]
    return "\n".join(lines)


def connection(topology: Topology, a: int, b: int) -> str:
    """The cell for ``a`` -> ``b`` (see the module docstring)."""
    direct = topology.link(a, b)
    if direct is not None and direct.kind == "nvlink":
        return f"NV{direct.count}/{direct.gbps:g}"
    if direct is not None and direct.kind == "shm":
        return f"SHM/{direct.gbps:g}"
    switched = _via_nvswitch(topology, a, b)
    if switched:
        return switched
    path = _shortest_path(topology, a, b)
    if path is None:
        return "-"
    return f"{_path_class(topology, path)}/{min(l.gbps for l in path):g}"


def _label(topology: Topology, device: int) -> str:
    return f"{topology.node(device).kind.upper()}{device}"


def _via_nvswitch(topology: Topology, a: int, b: int) -> Optional[str]:
    for node in topology.nodes:
        if node.kind == "switch" and node.detail == "nvswitch":
            up, down = topology.link(a, node.id), topology.link(node.id, b)
            if up is not None and down is not None:
                return f"NVS{min(up.count, down.count)}/{min(up.gbps, down.gbps):g}"
    return None


def _shortest_path(topology: Topology, a: NodeId, b: NodeId) -> Optional[List[Link]]:
    """Fewest hops from a to b over non-NVLink links, never relaying through another device."""
    out: Dict[NodeId, List[Link]] = {}
    for link in topology.links:
        if link.kind not in ("nvlink", "nvswitch"):
            out.setdefault(link.src, []).append(link)
    compute = set(topology.compute_ids)
    came: Dict[NodeId, Tuple[NodeId, Link]] = {}
    queue = deque([a])
    seen = {a}
    while queue:
        node = queue.popleft()
        if node == b:
            path = []
            while node != a:
                prev, link = came[node]
                path.append(link)
                node = prev
            return path[::-1]
        if node != a and node in compute:
            continue
        for link in out.get(node, ()):
            if link.dst not in seen:
                seen.add(link.dst)
                came[link.dst] = (node, link)
                queue.append(link.dst)
    return None


def _path_class(topology: Topology, path: List[Link]) -> str:
    kinds = {l.kind for l in path}
    if "net" in kinds:
        return "NET"
    if "qpi" in kinds:
        return "SYS"
    middle = [topology.node(l.dst) for l in path[:-1]]
    if any(n.kind == "socket" for n in middle):
        return "PHB"
    switches = sum(1 for n in middle if n.kind == "switch")
    return "PXB" if switches > 1 else "PIX"


def _forwarding_summary(topology: Topology) -> List[str]:
    """One line per switch, socket and NIC: what it joins, GB/s per direction."""
    lines = []
    for node in topology.nodes:
        if node.is_compute:
            continue
        peers = sorted(topology.neighbors(node.id), key=lambda x: (isinstance(x, str), str(x).zfill(6)))
        if not peers:
            continue
        kind = node.kind if node.kind != "switch" else f"{node.detail} switch"
        detail = f" ({node.detail})" if node.detail and node.kind != "switch" else ""
        joined = ", ".join(_peer(topology, node.id, p) for p in peers)
        lines.append(f"  {node.id}: {kind}{detail} -> {joined}")
    return (["Switches, sockets and NICs:"] + lines + [""]) if lines else []


def _peer(topology: Topology, node: NodeId, peer: NodeId) -> str:
    link = topology.link(node, peer)
    name = _label(topology, peer) if isinstance(peer, int) else str(peer)
    count = f" ({link.count} links)" if link.count > 1 else ""
    return f"{name} {link.gbps:g}{count}"
