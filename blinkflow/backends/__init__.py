"""Executors of collectives: ``cpu`` (numpy + MPI, shared memory on a host) and ``cuda`` (CuPy
RawModule kernels, CUDA IPC). Both implement :class:`blinkflow.backends.base.Backend`; CuPy is
imported only by the cuda backend, lazily.

Modules and subpackages, one job each:

``base``              the ``Backend`` interface every executor implements
``cpu``               subpackage: the CPU executor (numpy, shared memory, MPI)
``cuda``              subpackage: the CUDA executor (CuPy kernels, IPC, the device executor)
``adasum``            Adasum, Horovod's adaptive summation (the policy's ``adasum`` algorithm)
``device_abi``        the device executor's launch arrays, field for field as the kernel reads them
``device_emulator``   numpy emulator of the interpreter kernel (benches and tests only)
``host_memory``       numpy views of host memory by raw address, and an array's address
``policy_agreement``  every rank feeds the call-shape policy the same inputs, checked once
``quiet_wait``        waiting for MPI requests without spinning a core
``stuck_blocks``      which blocks of an aborted device launch were stuck, and on what
``teardown``          releasing MPI and CUDA objects when a peer may already have failed
``wire``              MPI under both transports: control messages in a host, data between hosts
"""
from .base import Backend, BackendContext

__all__ = ["Backend", "BackendContext"]
