"""Who is in the job and how it is laid out: run once by ``init`` on the background thread.

The topology package's ``discover_job`` names each rank's host (by processor name, or
``config.split_hosts`` consecutive blocks to exercise the multi-host path on one machine), its
device and the job's topology. Ranks are ordered
by global rank within a host and hosts by their lowest rank, so local and cross ranks are the
same on every rank. The job's topology and the all-reduce plan are made here and their digests
compared across ranks: ranks that would run different schedules fail now, loudly, instead of
deadlocking in the first collective.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..config import Config
from ..errors import ConfigError, PlanError
from ..topology.discover import discover_job


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
    """The all-reduce plan made at init."""

    def free(self) -> None:
        for comm in (self.cross_comm, self.local_comm, self.comm):
            try:
                comm.Free()
            except Exception:  # noqa: BLE001 - a failed peer can make Free raise; nothing to save
                pass


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
    gathered = comm.allgather((MPI.Get_processor_name(), os.getpid(), config.agreed()))
    _check_config(config, [agreed for _, _, agreed in gathered])
    gathered = [(m, p) for m, p, _ in gathered]
    machines = [m for m, _ in gathered]
    found = discover_job(comm, config)  # hosts by name, or split_hosts blocks; topology; devices
    hosts, topology, devices = list(found.hosts), found.topology, tuple(found.devices)
    host_index, local_ranks, local_sizes = layout(hosts)
    local_comm = comm.Split(color=host_index[rank], key=rank)
    cross_comm = comm.Split(color=local_ranks[rank], key=host_index[rank])
    plan_for = _planner(topology, devices)
    try:
        plan, failure = plan_for("allreduce"), None
    except Exception as e:  # noqa: BLE001 - every rank must hear of it, or the others hang below
        plan, failure = None, e
    _check_agreement(comm, topology, plan, failure)
    return Job(comm=comm, rank=rank, size=size, local_comm=local_comm, local_rank=local_ranks[rank],
               local_size=local_sizes[rank], cross_comm=cross_comm, cross_rank=cross_comm.Get_rank(),
               cross_size=cross_comm.Get_size(), hosts=tuple(hosts), machines=tuple(machines),
               pids=tuple(p for _, p in gathered), topology=topology, devices=tuple(devices),
               plan_for=plan_for, plan=plan)


def _planner(topology, devices) -> Callable[..., Any]:
    """``plan_for(collective, root=None)``: verified plans of the job's devices, memoised."""
    from ..planner import make_plan

    cache: Dict[Tuple[str, Optional[int]], Any] = {}

    def plan_for(collective: str, root: Optional[int] = None):
        key = (collective, root)
        if key not in cache:
            cache[key] = make_plan(topology, collective, devices=list(devices), root=root)
        return cache[key]

    return plan_for


def _check_config(config: Config, every: List[tuple]) -> None:
    """Every rank must share the settings that decide fusion, caching and data paths (ranks that
    disagree would wait for each other forever); raises ConfigError on every rank otherwise."""
    if all(agreed == every[0] for agreed in every):
        return
    differ = [name for i, (name, _) in enumerate(every[0]) if len({agreed[i][1] for agreed in every}) > 1]
    groups: Dict[tuple, List[int]] = {}
    for r, agreed in enumerate(every):
        groups.setdefault(tuple(v for name, v in agreed if name in differ), []).append(r)
    described = "; ".join(f"ranks {ranks}: " + ", ".join(f"{config.env_name(n)}={v}" for n, v in zip(differ, values))
                          for values, ranks in groups.items())
    raise ConfigError(f"ranks disagree on settings that must be equal everywhere ({described}); set them the same "
                      "on every rank (blinkrun flags do)")


def _check_agreement(comm, topology, plan, failure: Optional[BaseException] = None) -> None:
    """Every rank's (topology digest, plan digest) must be equal; a rank whose planning failed
    sends its error instead, so all ranks raise rather than some waiting forever."""
    mine = (topology.digest(), plan.digest()) if failure is None else ("failed", f"{type(failure).__name__}: {failure}")
    every = comm.allgather(mine)
    if len(set(every)) == 1 and every[0][0] != "failed":
        return
    groups: Dict[tuple, List[int]] = {}
    for r, d in enumerate(every):
        groups.setdefault(d, []).append(r)
    failed = [(ranks, d[1]) for d, ranks in groups.items() if d[0] == "failed"]
    if failed:
        raise PlanError("planning the all-reduce failed on " + "; ".join(f"ranks {ranks}: {why}" for ranks, why in failed))
    described = "; ".join(f"ranks {ranks}: topology {d[0]} plan {d[1]}" for d, ranks in groups.items())
    raise PlanError(f"ranks computed different topologies or plans ({described}). Every rank must see the "
                    "same topology: set BLINKFLOW_TOPOLOGY to the same preset or file on every rank.")
