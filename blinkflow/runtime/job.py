"""Who is in the job and how it is laid out: run once by ``init`` on the background thread.

The discovery protocol (:mod:`.discovery`) names each rank's host (by processor name, or
``config.split_hosts`` blocks of ranks to exercise the multi-host path on one machine), its
device and the job's topology. From that, "who is where" is worked out here, once, as a
:class:`~blinkflow.backends.base.Layout` every backend receives: hosts are ordered by their lowest
rank and ranks keep their order within a host, so local and cross ranks are the same on every
rank. The plans of every collective are made and agreed here (:mod:`.plans`): ranks that would
run different schedules fail now, loudly, instead of deadlocking in the first collective.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..backends import teardown
from ..backends.base import BackendContext, Layout
from ..config import Config
from ..errors import ConfigError
from .discovery import discover_job, host_indexes
from .link_probe import measured_topology
from .plans import PlanBook, init_keys


@dataclasses.dataclass
class Job:
    comm: Any
    local_comm: Any
    cross_comm: Any
    layout: Layout
    """Who is where: host index and device of every rank."""
    hosts: Tuple[str, ...]
    """hosts[r]: the (possibly split) host name of rank r."""
    machines: Tuple[str, ...]
    """machines[r]: rank r's real processor name (liveness checks need the real one)."""
    pids: Tuple[int, ...]
    topology: Any
    plans: PlanBook
    """``plans.get(collective, root=None)``: the agreed plans (root: a device id)."""
    ranks: Tuple[int, ...] = ()
    """A process set's job: the global rank of each of its ranks (empty: the job itself)."""

    @functools.cached_property
    def global_ranks(self) -> Tuple[int, ...]:
        """The global rank of each rank of this job (the identity for the job itself)."""
        return self.ranks or tuple(range(self.size))

    @property
    def rank(self) -> int:
        return self.layout.rank

    @property
    def size(self) -> int:
        return self.layout.size

    @property
    def local_rank(self) -> int:
        return self.layout.local_rank

    @property
    def local_size(self) -> int:
        return self.layout.local_size

    @property
    def cross_rank(self) -> int:
        return self.cross_comm.Get_rank()

    @property
    def cross_size(self) -> int:
        return self.cross_comm.Get_size()

    @property
    def devices(self) -> Tuple[int, ...]:
        return self.layout.devices

    @property
    def plan_for(self):
        return self.plans.get

    def backend_context(self, config: Config, timeline=None, failure=None) -> BackendContext:
        """What every backend of this job is built from."""
        return BackendContext(comm=self.comm, local_comm=self.local_comm, cross_comm=self.cross_comm,
                              layout=self.layout, topology=self.topology, plan_for=self.plans.get,
                              config=config, timeline=timeline, failure=failure)

    def free(self) -> None:
        for comm in (self.cross_comm, self.local_comm, self.comm):
            teardown.free(comm)


def discover(comm, config: Config, device: Optional[int] = None) -> Job:
    """Collective over ``comm`` (already a private duplicate). Raises ConfigError, TopologyError
    or PlanError on every rank when the ranks disagree. ``device``: the device this rank keeps
    from the job it re-forms from (see :func:`.discovery.probe_rank`)."""
    from mpi4py import MPI

    rank = comm.Get_rank()
    gathered = comm.allgather((MPI.Get_processor_name(), os.getpid(), config.agreed()))
    _check_config(config, [agreed for _, _, agreed in gathered])
    found = discover_job(comm, config, device=device)  # hosts by name, or split_hosts blocks; topology; devices
    topology = measured_topology(comm, config, found.topology, found.hosts)
    layout = Layout(rank, tuple(host_indexes(found.hosts)), tuple(found.devices))
    local_comm = comm.Split(color=layout.hosts[rank], key=rank)
    cross_comm = comm.Split(color=layout.local_rank, key=layout.hosts[rank])
    plans = PlanBook(comm, topology, layout.devices)
    plans.agree(init_keys(layout.devices))
    return Job(comm=comm, local_comm=local_comm, cross_comm=cross_comm, layout=layout, hosts=tuple(found.hosts),
               machines=tuple(m for m, _, _ in gathered), pids=tuple(p for _, p, _ in gathered),
               topology=topology, plans=plans)


def set_job(job: Job, ranks: Sequence[int]) -> Optional[Job]:
    """The job of the process set of global ``ranks`` (sorted), or None on ranks outside it.

    Collective over ``job.comm`` (the global job's): the set's communicator is split from it,
    ranks keep their order. Then, among the set's members only: its layout (hosts renumbered by
    their lowest member), local and cross communicators, the job's topology cut down to the set's
    devices, and its all-reduce plan agreed (a PlanError names the members that disagree). The
    planner thus packs trees on the set's own devices: Blink's partial allocation.
    """
    from mpi4py import MPI

    member = job.rank in ranks
    comm = job.comm.Split(color=0 if member else MPI.UNDEFINED, key=job.rank)
    if not member:
        return None
    made = [comm]
    try:
        index = list(ranks).index(job.rank)
        hosts = tuple(job.hosts[r] for r in ranks)
        layout = Layout(index, tuple(host_indexes(hosts)), tuple(job.devices[r] for r in ranks))
        local_comm = comm.Split(color=layout.hosts[index], key=index)
        made.append(local_comm)
        cross_comm = comm.Split(color=layout.local_rank, key=layout.hosts[index])
        made.append(cross_comm)
        topology = job.topology
        if len(layout.devices) < len(job.devices):
            topology = topology.subset(layout.devices, where=f"process set {list(ranks)}")
        plans = PlanBook(comm, topology, layout.devices)
        plans.agree(init_keys(layout.devices))
    except BaseException:
        for made_comm in reversed(made):
            teardown.free(made_comm)
        raise
    return Job(comm=comm, local_comm=local_comm, cross_comm=cross_comm, layout=layout, hosts=hosts,
               machines=tuple(job.machines[r] for r in ranks), pids=tuple(job.pids[r] for r in ranks),
               topology=topology, plans=plans, ranks=tuple(ranks))


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
