"""A :class:`BackendContext` for tests and benchmarks that drive a backend directly, made by the
runtime's own job set-up (:func:`.job.discover`), so hosts, local and cross ranks, devices and
plans follow exactly the runtime's rules (``BLINKFLOW_SPLIT_HOSTS``, ``BLINKFLOW_TOPOLOGY``,
probing) and the plans are agreed like the runtime's.
"""
from __future__ import annotations

from typing import Optional

from ..backends.base import BackendContext
from ..config import Config
from .job import Job, discover


def standalone_job(comm=None, config: Optional[Config] = None) -> Job:
    """The job on ``comm`` (default ``MPI.COMM_WORLD``, duplicated); collective over it."""
    from mpi4py import MPI

    comm = comm if comm is not None else MPI.COMM_WORLD
    return discover(comm.Dup(), config if config is not None else Config.from_env())


def standalone_context(comm=None, config: Optional[Config] = None) -> BackendContext:
    config = config if config is not None else Config.from_env()
    return standalone_job(comm, config).backend_context(config)
