"""Preset topologies of well-known machines, each stating its figures and their source.

Figures (GB/s per direction, 1 GB = 1e9 B):

* NVLink per link: P100 (NVLink1) 20, V100 (NVLink2) 25, A100 (NVLink3) 25, H100 (NVLink4) 25 —
  NVIDIA's DGX-1, DGX-2, DGX A100 and HGX H100 architecture white papers.
* DGX-1 link maps: Blink (MLSys 2020) Fig. 1 and the DGX-1V white paper. V100 double links
  0-3, 0-4, 1-2, 1-5, 2-3, 4-7, 5-6, 6-7; single 0-1, 0-2, 1-3, 2-6, 3-7, 4-5, 4-6, 5-7. P100: each
  GPU to the 3 others of its quad and to GPU i±4, single links.
* NVSwitch machines have switch fabrics, not point-to-point links: DGX-2 16 V100 × 6 NVLinks,
  DGX A100 8 × 12 NVLink3, HGX H100 8 × 18 NVLink4. Each is modelled as one non-blocking switch
  (the DGX-2's two baseboards are joined by 48 links, 1.2 TB/s: non-blocking for 8 × 150 GB/s).
* PCIe x16 per direction: Gen3 12, Gen4 24, Gen5 48 (NCCL's topology model uses 12 for Gen3);
  the CPU socket interconnect (QPI/UPI) 10 — NCCL models 6–10.
* Network: one InfiniBand EDR NIC 12.5 GB/s (100 Gb/s), HDR 25, NDR 50.

Multi-host presets are written ``Nx<preset>`` (``2xdgx1-v100``): N copies joined through their
NICs by one non-blocking network switch. Devices of host h get ids ``h * per_host + i``.
"""
from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import TopologyError
from .model import Link, Node, Topology, bidirectional

NVLINK_GBPS = {"p100": 20.0, "v100": 25.0, "a100": 25.0, "h100": 25.0}
PCIE_GBPS = {3: 12.0, 4: 24.0, 5: 48.0}
QPI_GBPS = 10.0
NIC_GBPS = {"edr": 12.5, "hdr": 25.0, "ndr": 50.0}

DGX1_V100_LINKS = {  # (a, b): number of NVLinks
    (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 5): 2, (2, 3): 2, (4, 7): 2, (5, 6): 2, (6, 7): 2,
    (0, 1): 1, (0, 2): 1, (1, 3): 1, (2, 6): 1, (3, 7): 1, (4, 5): 1, (4, 6): 1, (5, 7): 1,
}
DGX1_P100_LINKS = {
    **{(a, b): 1 for q in ((0, 1, 2, 3), (4, 5, 6, 7)) for i, a in enumerate(q) for b in q[i + 1:]},
    **{(i, i + 4): 1 for i in range(4)},
}


def _pcie_tree(gpus: Sequence[int], per_switch: int, sockets: int, gen: int,
               nics_per_switch: int = 0, nic_gbps: float = 0.0, prefix: str = "", host: str = "localhost"):
    """Nodes and links of a two-level PCIe tree: GPUs in groups of ``per_switch`` behind PCIe
    switches, switches split evenly over ``sockets`` CPU sockets joined by QPI/UPI."""
    nodes: List[Node] = []
    links: List[Link] = []
    bw = PCIE_GBPS[gen]
    groups = [list(gpus[i:i + per_switch]) for i in range(0, len(gpus), per_switch)]
    per_socket = max(1, -(-len(groups) // sockets))
    for s in range(sockets):
        nodes.append(Node(f"{prefix}cpu{s}", "socket", host))
    for s in range(sockets):
        for t in range(s + 1, sockets):
            links += bidirectional(f"{prefix}cpu{s}", f"{prefix}cpu{t}", "qpi", 1, QPI_GBPS)
    nic = 0
    for g, group in enumerate(groups):
        sw = f"{prefix}pcie{g}"
        nodes.append(Node(sw, "switch", host, detail="pcie"))
        links += bidirectional(sw, f"{prefix}cpu{g // per_socket}", "pcie", 1, bw)
        for gpu in group:
            links += bidirectional(gpu, sw, "pcie", 1, bw)
        for _ in range(nics_per_switch):
            name = f"{prefix}nic{nic}"
            nodes.append(Node(name, "nic", host, detail=f"{nic_gbps:g}GB/s"))
            links += bidirectional(name, sw, "pcie", 1, bw)
            nic += 1
    return nodes, links


def _gpus(ids: Sequence[int], model: str, host: str = "localhost") -> List[Node]:
    return [Node(i, "gpu", host, detail=model) for i in ids]


def dgx1(model: str = "v100") -> Topology:
    """DGX-1 with 8 P100 or V100: hybrid cube-mesh NVLink, PCIe Gen3 switches shared by GPU
    pairs (each with one EDR NIC), two sockets."""
    link_map = DGX1_V100_LINKS if model == "v100" else DGX1_P100_LINKS
    per_link = NVLINK_GBPS[model]
    nodes = _gpus(range(8), model.upper())
    links: List[Link] = []
    for (a, b), count in link_map.items():
        links += bidirectional(a, b, "nvlink", count, per_link)
    pn, pl = _pcie_tree(list(range(8)), per_switch=2, sockets=2, gen=3, nics_per_switch=1, nic_gbps=NIC_GBPS["edr"])
    return Topology.build(f"dgx1-{model}", nodes + pn, links + pl, where=f"preset dgx1-{model}")


def nvswitch_box(name: str, n: int, model: str, links_per_gpu: int, pcie_gen: int,
                 nic: str, gpus_per_pcie: int = 2) -> Topology:
    """An NVSwitch machine: every GPU joins one non-blocking switch with ``links_per_gpu``
    NVLinks; GPUs sit in pairs behind PCIe switches with one NIC each, over two sockets."""
    nodes = _gpus(range(n), model.upper())
    nodes.append(Node("nvswitch", "switch", detail="nvswitch"))
    links: List[Link] = []
    for g in range(n):
        links += bidirectional(g, "nvswitch", "nvswitch", links_per_gpu, NVLINK_GBPS[model])
    pn, pl = _pcie_tree(list(range(n)), per_switch=gpus_per_pcie, sockets=2, gen=pcie_gen,
                        nics_per_switch=1, nic_gbps=NIC_GBPS[nic])
    return Topology.build(name, nodes + pn, links + pl, where=f"preset {name}")


def pcie_8gpu() -> Topology:
    """8 GPUs without NVLink: pairs behind PCIe Gen3 switches, two sockets joined by QPI."""
    nodes = _gpus(range(8), "PCIE")
    pn, pl = _pcie_tree(list(range(8)), per_switch=2, sockets=2, gen=3, nics_per_switch=1, nic_gbps=NIC_GBPS["edr"])
    return Topology.build("pcie-8gpu", nodes + pn, pl, where="preset pcie-8gpu")


#: Shared-memory copy bandwidth between two ranks of one host, per direction. A conservative
#: figure for a copy through a shared-memory window on a current server (one core streams
#: ~10 GB/s); the runtime measures the real one.
SHM_GBPS = 10.0


def cpu_host(ranks: int = 4, host: str = "localhost", first_id: int = 0) -> Topology:
    """``ranks`` CPU processes sharing one host's memory: a full mesh of shared-memory links."""
    if ranks < 1:
        raise TopologyError(f"cpu-host needs at least 1 rank, got {ranks}", "preset cpu-host")
    ids = list(range(first_id, first_id + ranks))
    nodes = [Node(i, "cpu", host) for i in ids]
    links: List[Link] = []
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            links += bidirectional(a, b, "shm", 1, SHM_GBPS)
    return Topology.build(f"cpu-host:{ranks}", nodes, links, where="preset cpu-host")


def multi_host(base: Topology, hosts: int) -> Topology:
    """``hosts`` copies of ``base`` whose NICs all join one non-blocking network switch.

    A base without NICs gets one per host, linked to every compute device of the host (a
    CPU host's ranks share its NIC). Device ids are renumbered ``h * per_host + i``.
    """
    if hosts < 1:
        raise TopologyError(f"need at least 1 host, got {hosts}", "preset")
    stride = max(base.compute_ids) + 1  # presets number their devices 0..per_host-1
    return join_hosts([(f"host{h}", base) for h in range(hosts)], stride, where=f"preset {hosts}x{base.name}")


def join_hosts(parts: Sequence[Tuple[str, Topology]], stride: int, where: Optional[str] = None) -> Topology:
    """Join per-host topologies through one non-blocking network switch ``net``.

    Host h's device i becomes ``h * stride + i``; its other nodes ``<host>/<name>``. A host
    without NICs gets one (``<host>/nic0``, EDR) linked to each of its devices by PCIe.
    """
    nodes: List[Node] = [Node("net", "switch", "network", detail="net")]
    links: List[Link] = []
    for h, (host, topo) in enumerate(parts):
        def rename(x, h=h, host=host):
            return h * stride + x if isinstance(x, int) else f"{host}/{x}"

        nodes += [Node(rename(n.id), n.kind, host, n.detail) for n in topo.nodes]
        links += [Link(rename(l.src), rename(l.dst), l.kind, l.count, l.gbps, l.latency_us) for l in topo.links]
        nics = [n for n in topo.nodes if n.kind == "nic"]
        for nic in nics:
            links += bidirectional(rename(nic.id), "net", "net", 1, nic_rate(nic))
        if not nics:
            nic = f"{host}/nic0"
            nodes.append(Node(nic, "nic", host, detail=f"{NIC_GBPS['edr']:g}GB/s"))
            links += bidirectional(nic, "net", "net", 1, NIC_GBPS["edr"])
            for d in topo.compute_ids:
                links += bidirectional(rename(d), nic, "pcie", 1, PCIE_GBPS[3])
    name = f"{len(parts)}x{parts[0][1].name}" if len({t.name for _, t in parts}) == 1 else f"{len(parts)}hosts"
    return Topology.build(name, nodes, links, where)


def nic_rate(nic: Node) -> float:
    """GB/s of a NIC from its ``detail`` (``"25GB/s"``), EDR's 12.5 when it does not say."""
    m = re.match(r"([0-9.]+)GB/s", nic.detail or "")
    return float(m.group(1)) if m else NIC_GBPS["edr"]


PRESETS: Dict[str, Tuple[Callable[[], Topology], str]] = {
    "dgx1-p100": (lambda: dgx1("p100"), "DGX-1, 8 P100, NVLink1 hybrid cube-mesh, 20 GB/s per link"),
    "dgx1-v100": (lambda: dgx1("v100"), "DGX-1, 8 V100, NVLink2 hybrid cube-mesh, 25 GB/s per link"),
    "dgx2": (lambda: nvswitch_box("dgx2", 16, "v100", 6, 3, "edr"), "DGX-2, 16 V100, NVSwitch, 6 x 25 GB/s per GPU"),
    "dgx-a100": (lambda: nvswitch_box("dgx-a100", 8, "a100", 12, 4, "hdr"), "DGX A100, 8 A100, NVSwitch, 12 x 25 GB/s per GPU"),
    "hgx-h100": (lambda: nvswitch_box("hgx-h100", 8, "h100", 18, 5, "ndr"), "HGX H100, 8 H100, NVSwitch, 18 x 25 GB/s per GPU"),
    "pcie-8gpu": (pcie_8gpu, "8 GPUs, no NVLink, PCIe Gen3 switches, two sockets"),
    "cpu-host": (cpu_host, "N CPU ranks sharing one host's memory (cpu-host:N, default 4)"),
}


def preset_names() -> List[str]:
    return sorted(PRESETS)


def get_preset(spec: str) -> Topology:
    """A preset by name: ``dgx1-v100``, ``cpu-host:8``, ``2xdgx1-v100``, ``2xcpu-host:4``.

    Unknown names raise :class:`TopologyError` listing the known ones.
    """
    text = spec.strip()
    m = re.fullmatch(r"(\d+)x(.+)", text)
    if m:
        base, hosts = get_preset(m.group(2)), int(m.group(1))
        _check_size(hosts * len(base.compute_ids), spec)
        return multi_host(base, hosts)
    name, _, arg = text.partition(":")
    if name not in PRESETS:
        raise TopologyError(f"unknown preset {spec!r}; known presets: {', '.join(preset_names())} "
                            "(prefix Nx for N hosts, e.g. 2xdgx1-v100)", "--preset")
    if arg:
        if name == "cpu-host" and not arg.isdecimal():
            raise TopologyError(f"cpu-host:{arg} needs a number of ranks, e.g. cpu-host:4", "--preset")
        if name != "cpu-host":
            raise TopologyError(f"preset {name!r} takes no argument {arg!r} (only cpu-host:N does)", "--preset")
        _check_size(int(arg), spec)
        return cpu_host(int(arg))
    return PRESETS[name][0]()


#: The most devices a preset describes: a typo such as ``99999999999xcpu-host:1`` must fail at
#: once, not build nodes until memory runs out. Larger machines can still come from a file.
MAX_PRESET_DEVICES = 1024


def _check_size(devices: int, spec: str) -> None:
    if devices > MAX_PRESET_DEVICES:
        raise TopologyError(f"preset {spec!r} has {devices} devices; presets describe at most "
                            f"{MAX_PRESET_DEVICES} devices (write a topology file for more)", "--preset")
