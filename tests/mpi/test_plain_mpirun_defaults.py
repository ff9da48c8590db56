"""Under a plain ``mpirun`` (no blinkrun, so none of its ``--mca`` settings), ``import blinkflow``
puts Open MPI's defaults in place before a later mpi4py import starts MPI: Open MPI's UCX
one-sided component does not print "OSC UCX component priority set inside component query
failed" for blinkflow's shared-memory windows."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.mpi

SCRIPT = ("import blinkflow as bf\nfrom mpi4py import MPI\nimport numpy as np\nbf.init()\n"
          "print('sum', bf.allreduce(np.ones(3), op=bf.Sum)[0])\nbf.shutdown()\n")


def plain_mpirun(script, env):
    from blinkflow.launcher.job.mpi_impl import OPEN_MPI, detect

    impl = detect()
    if impl.family != OPEN_MPI:
        pytest.skip(f"the UCX one-sided component is Open MPI's; this machine's MPI is {impl.describe()}")
    argv = [impl.mpirun, "-np", "2", "--oversubscribe"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    return subprocess.run(argv + [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)


def test_importing_blinkflow_before_mpi4py_keeps_open_mpi_quiet():
    env = {k: v for k, v in os.environ.items() if k != "OMPI_MCA_osc"}
    proc = plain_mpirun(SCRIPT, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("sum 2.0") == 2, proc.stdout
    assert "OSC UCX" not in proc.stderr, proc.stderr


def test_the_users_own_setting_wins():
    script = "import os, blinkflow\nprint('osc', os.environ['OMPI_MCA_osc'])\n"
    env = dict(os.environ, OMPI_MCA_osc="sm")
    proc = plain_mpirun(script, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["osc", "sm", "osc", "sm"], proc.stdout
