"""A :class:`BackendContext` built without the runtime, for tests and benchmarks that drive a
backend directly. The runtime builds its own; this one follows the same rules:

* ``local_comm`` = ranks sharing a host (``MPI.COMM_TYPE_SHARED``), or with
  ``config.split_hosts = H`` consecutive blocks of ``size / H`` ranks acting as H hosts;
* ``cross_comm`` = ranks with the same local rank, ordered by host;
* the topology is ``cpu-host:k`` (``Hxcpu-host:k`` for several hosts) and rank r drives device r;
* plans come from the planner when it is available, else the backend's own star trees.
"""
from __future__ import annotations

from typing import Optional

from ...config import Config
from ...errors import ConfigError
from ..base import BackendContext


def split_comms(comm, config: Config):
    """(local_comm, cross_comm) of ``comm`` under ``config.split_hosts``."""
    from mpi4py import MPI

    if config.split_hosts:
        if comm.Get_size() % config.split_hosts:
            raise ConfigError(f"BLINKFLOW_SPLIT_HOSTS={config.split_hosts} does not divide {comm.Get_size()} ranks")
        per_host = comm.Get_size() // config.split_hosts
        local = comm.Split(comm.Get_rank() // per_host, comm.Get_rank())
    else:
        local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    # hosts are numbered by their lowest global rank, so cross_comm is ordered by host
    leader = local.bcast(comm.Get_rank(), root=0)
    cross = comm.Split(local.Get_rank(), leader)
    return local, cross


def _topology(nhosts: int, per_host: int):
    from ...topology.presets import get_preset

    return get_preset(f"cpu-host:{per_host}" if nhosts == 1 else f"{nhosts}xcpu-host:{per_host}")


def standalone_context(comm=None, config: Optional[Config] = None) -> BackendContext:
    from mpi4py import MPI

    comm = comm if comm is not None else MPI.COMM_WORLD
    config = config if config is not None else Config.from_env()
    local, cross = split_comms(comm, config)
    nhosts = sum(comm.allgather(int(local.Get_rank() == 0)))
    even = len(set(comm.allgather(local.Get_size()))) == 1
    topology = _topology(nhosts, local.Get_size()) if even else None
    plans = {}

    def plan_for(collective, root=None):
        key = (collective, root)
        if key not in plans:
            plans[key] = _make_plan(topology, collective, root)
        return plans[key]

    return BackendContext(comm=comm, local_comm=local, cross_comm=cross, topology=topology,
                          devices=tuple(range(comm.Get_size())), plan_for=plan_for, config=config)


def _make_plan(topology, collective, root):
    """The planner's plan, or None (the backend's own trees) while the planner is unavailable."""
    if topology is None:
        return None
    try:
        from ...planner import make_plan
    except ImportError:
        return None
    return make_plan(topology, collective, root=root)
