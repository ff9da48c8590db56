"""Rank 0's half of discovery: every rank's probe in, the job's topology out (pure, no MPI).

A :class:`RankProbe` is what one rank learnt about itself; :func:`merge_probes` turns the list
of all probes into a :class:`JobTopology`, and :func:`assign_topology` maps ranks onto a given
topology (``BLINKFLOW_TOPOLOGY``). Both are plain functions of their inputs so they are tested
without MPI; ``blinkflow.runtime.discovery`` runs them inside a job.

Device ids of the job:

* CPU job: device id = global rank; each host is a ``cpu_host`` (a shared-memory mesh of its
  ranks); several hosts each get a NIC ``<host>/nic0`` joined to a ``net`` switch, the shape of
  ``presets.multi_host``.
* GPU job on one host: device id = the GPU's nvidia-smi index.
* GPU job on several hosts: host h (in order of first rank) GPU i → ``h * stride + i`` with
  ``stride`` = the largest GPU index on any host + 1 (8 on DGX boxes: host 1 GPU 3 → 11).
  Switches, sockets and NICs become ``<host>/<name>``; each host's NICs join the ``net`` switch.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import TopologyError
from .model import Link, Node, Topology, bidirectional, hosts_by_first_appearance
from .nvidia_smi import topology_from_nvidia_smi
from .presets import NIC_GBPS, PCIE_GBPS, SHM_GBPS, join_hosts

WHERE = "topology discovery"


@dataclasses.dataclass(frozen=True)
class JobTopology:
    """The job's hardware graph and where each rank sits on it.

    ``devices[r]`` is the topology device id of MPI rank ``r``; ``hosts[r]`` its host name.
    """

    topology: Topology
    devices: Tuple[int, ...]
    hosts: Tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class RankProbe:
    """What one rank learnt about itself (small and picklable: it travels through MPI)."""

    rank: int
    host: str
    """Host name as the job sees it (``host<k>`` under ``BLINKFLOW_SPLIT_HOSTS``)."""
    machine: str
    """The real processor name, even under split hosts."""
    local_rank: int
    gpu: Optional[int] = None
    """nvidia-smi index of this rank's GPU, None for a CPU rank."""
    gpu_text: Optional[str] = None
    """``nvidia-smi topo -m`` text of the host (sent by the host's first local rank only)."""
    error: Optional[str] = None
    """Why probing failed on this rank; rank 0 raises it for everyone."""


def merge_probes(probes: Sequence[RankProbe]) -> JobTopology:
    """The JobTopology of a job whose ranks sent ``probes`` (see the module docstring)."""
    probes = _checked(probes)
    with_gpu = [p.rank for p in probes if p.gpu is not None]
    if with_gpu and len(with_gpu) != len(probes):
        without = [p.rank for p in probes if p.gpu is None]
        raise TopologyError(f"ranks {_fmt(with_gpu)} have a GPU but ranks {_fmt(without)} do not; run "
                            "every rank on a GPU host, or set BLINKFLOW_BACKEND=cpu", WHERE)
    hosts = list(hosts_by_first_appearance(p.host for p in probes))
    if not with_gpu:
        return _cpu_job(probes, hosts)
    return _gpu_job(probes, hosts)


def assign_topology(topology: Topology, probes: Sequence[RankProbe], where: str = "BLINKFLOW_TOPOLOGY"
                    ) -> JobTopology:
    """Map rank r onto the r-th compute device of a given topology (subset to the job's size).

    Two ranks that the topology puts on one host must run on one machine, since ranks of a
    host may share memory.
    """
    probes = _checked(probes)
    size = len(probes)
    ids = topology.compute_ids
    if len(ids) < size:
        raise TopologyError(f"topology {topology.name!r} has {len(ids)} devices but the job has {size} "
                            f"ranks; launch at most {len(ids)} ranks or give a topology with {size} "
                            f"devices (e.g. cpu-host:{size})", where)
    devices = _assigned(ids, probes, where)
    topo = topology if len(ids) == size else topology.subset(devices, where)
    hosts = tuple(topo.node(d).host for d in devices)
    machine_of: Dict[str, Tuple[int, str]] = {}
    for probe, host in zip(probes, hosts):
        first = machine_of.setdefault(host, (probe.rank, probe.machine))
        if first[1] != probe.machine:
            raise TopologyError(f"ranks {first[0]} and {probe.rank} run on different machines ({first[1]}, "
                                f"{probe.machine}) but the topology puts both on host {host!r}; use a "
                                "topology with one host per machine", where)
    return JobTopology(topo, tuple(devices), hosts)


def _assigned(ids: Sequence[int], probes: Sequence[RankProbe], where: str) -> List[int]:
    """Each rank's device: the one it kept from the job it re-formed from (``probe.gpu``), else
    the first device nobody holds, in rank order (a fresh job: rank r takes the r-th)."""
    kept = [p.gpu for p in probes]
    held = [g for g in kept if g is not None]
    if any(g not in ids for g in held) or len(set(held)) != len(held):
        raise TopologyError(f"ranks re-forming the job keep devices {held}, which are not distinct devices of the "
                            f"topology ({list(ids)})", where)
    free = iter(d for d in ids if d not in held)
    return [g if g is not None else next(free) for g in kept]


# ---- CPU jobs ------------------------------------------------------------------------------------
def _cpu_job(probes: Sequence[RankProbe], hosts: List[str]) -> JobTopology:
    nodes: List[Node] = []
    links: List[Link] = []
    for host in hosts:
        ranks = [p.rank for p in probes if p.host == host]
        nodes += [Node(r, "cpu", host) for r in ranks]
        for i, a in enumerate(ranks):
            for b in ranks[i + 1:]:
                links += bidirectional(a, b, "shm", 1, SHM_GBPS)
    if len(hosts) > 1:
        nodes.append(Node("net", "switch", "network", detail="net"))
        for host in hosts:
            nic = f"{host}/nic0"
            nodes.append(Node(nic, "nic", host, detail=f"{NIC_GBPS['edr']:g}GB/s"))
            links += bidirectional(nic, "net", "net", 1, NIC_GBPS["edr"])
            for p in probes:
                if p.host == host:
                    links += bidirectional(p.rank, nic, "pcie", 1, PCIE_GBPS[3])
    name = f"cpu-host:{len(probes)}" if len(hosts) == 1 else f"{len(hosts)}xcpu-host"
    topo = Topology.build(name, nodes, links, WHERE)
    return JobTopology(topo, tuple(p.rank for p in probes), tuple(p.host for p in probes))


# ---- GPU jobs ------------------------------------------------------------------------------------
def _gpu_job(probes: Sequence[RankProbe], hosts: List[str]) -> JobTopology:
    full: Dict[str, Topology] = {}
    for host in hosts:
        ranks = [p for p in probes if p.host == host]
        text = next((p.gpu_text for p in ranks if p.gpu_text), None)
        if text is None:
            raise TopologyError(f"no rank on host {host} sent its `nvidia-smi topo -m` table", WHERE)
        full[host] = topology_from_nvidia_smi(text, where=f"nvidia-smi topo -m on {host}", name=host, host=host)
        used: Dict[int, int] = {}
        for p in ranks:
            if p.gpu not in full[host].gpu_ids:
                raise TopologyError(f"rank {p.rank} on {host} was given GPU {p.gpu}, which that host does not "
                                    f"have (GPUs {_fmt(full[host].gpu_ids)}); check CUDA_VISIBLE_DEVICES", WHERE)
            if p.gpu in used:
                raise TopologyError(f"ranks {used[p.gpu]} and {p.rank} on {host} both use GPU {p.gpu}; launch one "
                                    f"rank per GPU (this host has {len(full[host].gpu_ids)}), or set "
                                    "BLINKFLOW_BACKEND=cpu (blinkrun --backend cpu) to run on the CPUs", WHERE)
            used[p.gpu] = p.rank
    if len(hosts) == 1:
        devices = tuple(p.gpu for p in probes)
        topo = full[hosts[0]]
    else:
        # Join whole hosts first, then cut: every NIC of a host stays usable by its GPUs.
        stride = max(max(t.gpu_ids) for t in full.values()) + 1
        topo = join_hosts([(h, full[h]) for h in hosts], stride, WHERE)
        index = {h: i for i, h in enumerate(hosts)}
        devices = tuple(index[p.host] * stride + p.gpu for p in probes)
    if len(devices) < len(topo.compute_ids):
        topo = topo.subset(sorted(devices), WHERE)
    return JobTopology(topo, devices, tuple(p.host for p in probes))


# ---- helpers -------------------------------------------------------------------------------------
def _checked(probes: Sequence[RankProbe]) -> List[RankProbe]:
    probes = sorted(probes, key=lambda p: p.rank)
    if not probes:
        raise TopologyError("no probes: the job has no ranks", WHERE)
    for p in probes:
        if p.error:
            raise TopologyError(f"rank {p.rank} on {p.host}: {p.error}", WHERE)
    if [p.rank for p in probes] != list(range(len(probes))):
        raise TopologyError(f"probes cover ranks {_fmt([p.rank for p in probes])}, expected 0..{len(probes) - 1}",
                            WHERE)
    return probes


def _fmt(ids) -> str:
    return ",".join(str(i) for i in ids)
