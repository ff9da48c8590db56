"""The CPU executor: numpy over MPI shared-memory windows inside a host, MPI point-to-point
across hosts (Blink's three-phase protocol, MLSys 2020 §5)."""
from .backend import CpuBackend

__all__ = ["CpuBackend"]
