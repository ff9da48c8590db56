"""The CPU executor: numpy over MPI shared-memory windows inside a host, MPI point-to-point
across hosts (Blink's three-phase protocol, MLSys 2020 §5).

Modules, one job each:

``backend``           ``CpuBackend``: every collective by the policy's algorithm
``transport``         the runner's ``Transport``: shared memory in a host, MPI between hosts
``shm``               shared-memory segments of a host's ranks (``MPI_Win_allocate_shared``)
``mailbox``           control messages between a host's ranks: a shared-memory ring per pair
``kernels``           the numpy data path: elementwise combiners, chunk by chunk
``cma``               cross-memory attach: one copy to or from a peer process's memory
``single_copy``       phase 1 of the single-copy all-reduce: shards reduced from peers' memory
``single_copy_path``  the single-copy all-reduce: a schedule's one-hop stars run in place
``mpi_allreduce``     the ``mpi`` algorithm: a small all-reduce by MPI's own all-reduce
"""
from .backend import CpuBackend

__all__ = ["CpuBackend"]
