"""Who is in the job and how it is laid out: run once by ``init`` on the background thread.

Hosts are told apart by processor name (``config.split_hosts`` > 0 instead cuts the ranks into
that many consecutive blocks, to exercise the multi-host path on one machine). Ranks are ordered
by global rank within a host and hosts by their lowest rank, so local and cross ranks are the
same on every rank. The job's topology and the all-reduce plan are made here and their digests
compared across ranks: ranks that would run different schedules fail now, loudly, instead of
deadlocking in the first collective.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..config import Config
from ..errors import PlanError


@dataclasses.dataclass
class Job:
    comm: Any
    rank: int
    size: int
    local_comm: Any
    local_rank: int
    local_size: int
    cross_comm: Any
    cross_rank: int
    cross_size: int
    hosts: Tuple[str, ...]
    """hosts[r]: the (possibly split) host of rank r."""
    machines: Tuple[str, ...]
    """machines[r]: rank r's real processor name (liveness checks need the real one)."""
    pids: Tuple[int, ...]
    topology: Any
    devices: Tuple[int, ...]
    plan_for: Callable[..., Any]
    plan: Any
    """The all-reduce plan made at init (None where no planner is installed)."""

    def free(self) -> None:
        for comm in (self.cross_comm, self.local_comm, self.comm):
            try:
                comm.Free()
            except Exception:  # noqa: BLE001 - a failed peer can make Free raise; nothing to save
                pass


def host_of_each_rank(names: List[str], split_hosts: int) -> List[str]:
    """The host of every rank: real names, or ``split_hosts`` consecutive blocks."""
    size = len(names)
    if split_hosts <= 0:
        return list(names)
    blocks = min(split_hosts, size)
    return [f"host{r * blocks // size}" for r in range(size)]


def layout(hosts: List[str]) -> Tuple[List[int], List[int], List[int]]:
    """(host index, local rank, local size) of every rank; hosts ordered by their lowest rank."""
    order: Dict[str, int] = {}
    for h in hosts:
        order.setdefault(h, len(order))
    host_index = [order[h] for h in hosts]
    local_rank, seen = [], {}
    for h in host_index:
        local_rank.append(seen.get(h, 0))
        seen[h] = seen.get(h, 0) + 1
    return host_index, local_rank, [seen[h] for h in host_index]


def discover(comm, config: Config) -> Job:
    """Collective over ``comm`` (already a private duplicate). Raises PlanError on disagreement."""
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    machine = MPI.Get_processor_name()
    gathered = comm.allgather((machine, os.getpid()))
    machines = [m for m, _ in gathered]
    hosts = host_of_each_rank(machines, config.split_hosts)
    host_index, local_ranks, local_sizes = layout(hosts)
    local_comm = comm.Split(color=host_index[rank], key=rank)
    cross_comm = comm.Split(color=local_ranks[rank], key=host_index[rank])
    topology, devices = _topology(comm, config, hosts, host_index, local_ranks)
    plan_for = _planner(topology, devices)
    plan = plan_for("allreduce")
    _check_agreement(comm, topology, plan)
    return Job(comm=comm, rank=rank, size=size, local_comm=local_comm, local_rank=local_ranks[rank],
               local_size=local_sizes[rank], cross_comm=cross_comm, cross_rank=cross_comm.Get_rank(),
               cross_size=cross_comm.Get_size(), hosts=tuple(hosts), machines=tuple(machines),
               pids=tuple(p for _, p in gathered), topology=topology, devices=tuple(devices),
               plan_for=plan_for, plan=plan)


def _topology(comm, config: Config, hosts, host_index, local_ranks):
    """The topology branch's ``discover_job`` when installed; else the CPU-host presets."""
    if importlib.util.find_spec("blinkflow.topology.discover") is not None:
        from ..topology.discover import discover_job

        job = discover_job(comm, config)
        return job.topology, tuple(job.devices)
    from ..topology.presets import cpu_host, multi_host

    nhosts = max(host_index) + 1
    per_host = max(local_ranks) + 1
    if nhosts == 1:
        return cpu_host(len(hosts), host=hosts[0]), tuple(range(len(hosts)))
    devices = tuple(h * per_host + l for h, l in zip(host_index, local_ranks))
    topology = multi_host(cpu_host(per_host), nhosts)
    if len(devices) != len(topology.compute_ids):
        topology = topology.subset(devices, where="job layout")
    return topology, devices


def _planner(topology, devices) -> Callable[..., Any]:
    """``plan_for(collective, root=None)``, memoised; None plans where no planner is installed."""
    from .. import planner

    make_plan = getattr(planner, "make_plan", None)
    cache: Dict[Tuple[str, Optional[int]], Any] = {}

    def plan_for(collective: str, root: Optional[int] = None):
        key = (collective, root)
        if key not in cache:
            cache[key] = None if make_plan is None else make_plan(topology, collective, devices=list(devices), root=root)
        return cache[key]

    return plan_for


def _check_agreement(comm, topology, plan) -> None:
    mine = (topology.digest(), plan.digest() if plan is not None else "")
    every = comm.allgather(mine)
    if len(set(every)) == 1:
        return
    groups: Dict[tuple, List[int]] = {}
    for r, d in enumerate(every):
        groups.setdefault(d, []).append(r)
    described = "; ".join(f"ranks {ranks}: topology {d[0]} plan {d[1] or '-'}" for d, ranks in groups.items())
    raise PlanError(f"ranks computed different topologies or plans ({described}). Every rank must see the "
                    "same topology: set BLINKFLOW_TOPOLOGY to the same preset or file on every rank.")
