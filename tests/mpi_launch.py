"""The names multi-process tests and helpers outside tests/mpi and tests/tf call (``run_mpi``,
``mpirun_argv``, ``fake_cupy_env``), kept as thin wrappers over the one harness,
tests/harness.py: new tests use :func:`harness.run_ranks` and :func:`harness.launch`."""
from __future__ import annotations

import subprocess
from typing import Dict, List, Optional, Sequence

from harness import FAKE_CUPY, fake_cupy_env, mpirun_command, run_ranks  # noqa: F401 - re-exported


def mpirun_argv(nprocs: int, argv: Sequence[str], env: Optional[Dict[str, str]] = None) -> List[str]:
    """mpirun's argv for ``argv`` on ``nprocs`` ranks, ``env`` set on every rank. Callers add
    hosts (``-H``) after it, which the builder cannot count slots of: ranks may oversubscribe."""
    cmd = mpirun_command(nprocs, argv, env)
    if "--oversubscribe" not in cmd:
        cmd.insert(3, "--oversubscribe")
    return cmd


def run_mpi(nprocs: int, argv: Sequence[str], timeout: float = 120, env: Optional[Dict[str, str]] = None,
            check: bool = True, mpi_options: Sequence[str] = (), cwd: Optional[str] = None
            ) -> subprocess.CompletedProcess:
    """:func:`harness.run_ranks` under its older name."""
    return run_ranks(nprocs, argv, env=env, timeout=timeout, check=check, mpi_options=mpi_options, cwd=cwd)
