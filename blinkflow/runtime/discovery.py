"""Live discovery of a job's topology: every rank probes itself, rank 0 merges, all agree.

Contract (used by :mod:`.job`)::

    found = discover_job(comm, config)    # collective over the mpi4py communicator ``comm``
    found.topology                        # Topology of the job's devices
    found.devices[r], found.hosts[r]      # device id and host name of rank r

Each rank probes: its host (:func:`host_of`: the processor name, or a block of ranks under
``BLINKFLOW_SPLIT_HOSTS``), its local rank on that host (the job's
:class:`~blinkflow.backends.base.Layout` rule: its place among the ranks of its host, in rank
order, hosts numbered by :func:`host_indexes`) and, unless ``config.backend == "cpu"``,
the host's GPUs (:func:`blinkflow.topology.probe.probe_gpu`). No GPU means a CPU rank. Rank 0
gathers the probes, builds the JobTopology with the pure :func:`~blinkflow.topology.merge.merge_probes`
(or maps the ranks onto ``BLINKFLOW_TOPOLOGY``: :func:`~blinkflow.topology.merge.assign_topology`)
and broadcasts it — or broadcasts the error, so every rank raises the same TopologyError
instead of some ranks waiting forever.

The topology package stays parsers, presets and the model; this protocol is the runtime's.
"""
from __future__ import annotations

import traceback
from typing import Callable, List, Mapping, Optional, Sequence

from ..backends.base import Layout
from ..config import Config
from ..errors import BlinkflowError, TopologyError
from ..topology.merge import JobTopology, RankProbe, assign_topology, merge_probes
from ..topology.model import hosts_by_first_appearance
from ..topology.probe import host_gpu_text, probe_gpu
from ..topology.resolve import resolve_topology

__all__ = ["JobTopology", "RankProbe", "discover_job", "host_indexes", "host_of", "probe_rank"]


def host_of(rank: int, size: int, split_hosts: int, machine: str) -> str:
    """The host name of ``rank``: its machine, or under ``split_hosts = k`` block
    ``rank * k // size`` of consecutive ranks (any k <= size: 3 ranks on 2 hosts are 2 + 1)."""
    if split_hosts <= 0:
        return machine
    return f"host{rank * split_hosts // size}"


def host_indexes(hosts: Sequence[str]) -> List[int]:
    """The host index of every rank (what :class:`Layout` takes): hosts are numbered in order of
    their lowest rank."""
    index = {host: i for i, host in enumerate(hosts_by_first_appearance(hosts))}
    return [index[host] for host in hosts]


def discover_job(comm, config: Config, environ: Optional[Mapping[str, str]] = None,
                 gpu_text_source: Callable[[], Optional[str]] = host_gpu_text, device: Optional[int] = None
                 ) -> JobTopology:
    """Collective: the job's JobTopology, identical on every rank of ``comm``."""
    probe = probe_rank(comm, config, environ, gpu_text_source, device)
    probes: Optional[List[RankProbe]] = comm.gather(probe, root=0)
    result = None
    if comm.Get_rank() == 0:
        try:
            if config.topology:
                topology = resolve_topology(config.topology, where="BLINKFLOW_TOPOLOGY")
                result = assign_topology(topology, probes)
            else:
                result = merge_probes(probes)
        except BlinkflowError as e:
            result = TopologyError(str(e))
        except Exception as e:  # a bug must still reach every rank rather than hang them
            result = TopologyError(f"merging the probes failed on rank 0: {e!r}", "topology discovery")
    result = comm.bcast(result, root=0)
    if isinstance(result, BaseException):
        raise result
    return result


def probe_rank(comm, config: Config, environ: Optional[Mapping[str, str]] = None,
               gpu_text_source: Callable[[], Optional[str]] = host_gpu_text, device: Optional[int] = None
               ) -> RankProbe:
    """What this rank can learn about itself. Collective (every rank's host is gathered).
    ``device``: the GPU (or device of a given topology) this rank drove before the job re-formed
    around it; a rank keeps its device when its rank and local rank change."""
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    machine = MPI.Get_processor_name()
    host = host_of(rank, size, config.split_hosts, machine)
    # Only where the ranks are, not which device each drives: that is what this probe finds out.
    local_rank = Layout(rank, tuple(host_indexes(comm.allgather(host))), devices=()).local_rank
    try:
        gpu, text = probe_gpu(config.backend, bool(config.topology), local_rank, environ, gpu_text_source)
    except BlinkflowError as e:
        return RankProbe(rank, host, machine, local_rank, error=str(e))
    except Exception:  # an unexpected failure must still reach rank 0, or the job hangs
        return RankProbe(rank, host, machine, local_rank, error=traceback.format_exc(limit=3))
    if device is not None and (gpu is not None or config.topology):
        gpu = device
    # Only the host's first rank ships the table; the others would send the same text.
    return RankProbe(rank, host, machine, local_rank, gpu, text if local_rank == 0 else None)
