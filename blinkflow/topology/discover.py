"""Live discovery of a job's topology: every rank probes itself, rank 0 merges, all agree.

Contract (used by the runtime)::

    job = discover_job(comm, config)      # collective over the mpi4py communicator ``comm``
    job.topology                          # Topology of the job's devices
    job.devices[r], job.hosts[r]          # device id and host name of rank r

Each rank probes: its host name (``MPI.Get_processor_name()``), its local rank on that host
(``comm.Split_type(COMM_TYPE_SHARED)``) and, unless ``config.backend == "cpu"``, the host's
GPUs (:mod:`.probe`: NVML, else ``nvidia-smi topo -m``); its GPU is
``CUDA_VISIBLE_DEVICES[local_rank]`` (all GPUs when unset; the one GPU when a launcher gives each
rank its own). No GPU means a CPU rank.
Rank 0 gathers the probes, builds the JobTopology with the pure :func:`.merge.merge_probes`
and broadcasts it — or broadcasts the error, so every rank raises the same TopologyError
instead of some ranks waiting forever.

``config.topology`` (``BLINKFLOW_TOPOLOGY``) replaces the probing of devices: ranks map onto
that topology's compute devices in order (:func:`.merge.assign_topology`).
``config.split_hosts = k`` makes consecutive blocks of ranks act as hosts ``host0..host{k-1}``
(tests of the multi-host path on one machine).

This is the only module of the topology package that talks to MPI, and only through the
communicator it is handed; ``mpi4py.MPI`` is imported when discovery runs (the caller, holding
a communicator, has imported it already).
"""
from __future__ import annotations

import traceback
from typing import Callable, Mapping, Optional

from ..config import Config
from ..errors import BlinkflowError, TopologyError
from .merge import JobTopology, RankProbe, assign_topology, merge_probes
from .nvidia_smi import parse_smi_matrix
from .probe import host_gpu_text, visible_gpus
from .resolve import resolve_topology

__all__ = ["JobTopology", "RankProbe", "discover_job", "probe_rank", "merge_probes"]


def discover_job(comm, config: Config, environ: Optional[Mapping[str, str]] = None,
                 gpu_text_source: Callable[[], Optional[str]] = host_gpu_text) -> JobTopology:
    """Collective: the job's JobTopology, identical on every rank of ``comm``."""
    probe = probe_rank(comm, config, environ, gpu_text_source)
    probes = comm.gather(probe, root=0)
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
               gpu_text_source: Callable[[], Optional[str]] = host_gpu_text) -> RankProbe:
    """What this rank can learn about itself. Collective (it splits ``comm`` by host)."""
    from mpi4py import MPI  # the caller's MPI; see the module docstring

    rank, size = comm.Get_rank(), comm.Get_size()
    machine = MPI.Get_processor_name()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        real_local_rank = local.Get_rank()
    finally:
        local.Free()
    if config.split_hosts > 0:
        block = rank * config.split_hosts // size
        host = f"host{block}"
        first = next(r for r in range(size) if r * config.split_hosts // size == block)
        local_rank = rank - first
    else:
        host, local_rank = machine, real_local_rank
    try:
        gpu, text = _probe_gpu(config, local_rank, environ, gpu_text_source)
    except BlinkflowError as e:
        return RankProbe(rank, host, machine, local_rank, error=str(e))
    except Exception:  # an unexpected failure must still reach rank 0, or the job hangs
        return RankProbe(rank, host, machine, local_rank, error=traceback.format_exc(limit=3))
    # Only the host's first rank ships the table; the others would send the same text.
    return RankProbe(rank, host, machine, local_rank, gpu, text if local_rank == 0 else None)


def _probe_gpu(config: Config, local_rank: int, environ, gpu_text_source):
    if config.backend == "cpu" or config.topology:
        return None, None
    text = gpu_text_source()
    if text is None:
        if config.backend == "cuda":
            raise TopologyError("BLINKFLOW_BACKEND=cuda but this host has no NVIDIA GPU (no NVML, no "
                                "nvidia-smi); use BLINKFLOW_BACKEND=cpu or auto", "GPU probe")
        return None, None
    visible = visible_gpus(environ)
    if visible is None:
        visible = [int(label[3:]) for label in parse_smi_matrix(text, "nvidia-smi topo -m").gpu_labels]
    if not visible:
        return None, None
    if len(visible) == 1:
        # Launchers that give each rank a private GPU (CUDA_VISIBLE_DEVICES=<its GPU>) make the
        # one visible GPU this rank's, whatever its local rank; two ranks given the same GPU are
        # caught by the merge.
        return visible[0], text
    if local_rank >= len(visible):
        raise TopologyError(f"local rank {local_rank} has no GPU: this host shows {len(visible)} "
                            f"(CUDA_VISIBLE_DEVICES / nvidia-smi); launch at most {len(visible)} ranks "
                            "per host", "GPU probe")
    return visible[local_rank], text
