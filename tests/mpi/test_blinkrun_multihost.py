"""blinkrun across two hosts through mpirun's ssh launch. Needs a second host: on one machine,
``sh tests/multihost/netns_sshd.sh up`` (root) makes one in a network namespace, and
``eval "$(sh tests/multihost/netns_sshd.sh env)"`` points these tests at it (Open MPI or MPICH)."""
import os

import pytest

from blinkrun_helpers import PY, run_blinkrun

from blinkflow.launcher.mpi_impl import detect

HOSTS = os.environ.get("BLINKRUN_TEST_HOSTS")   # "here:2,there:2"

pytestmark = [pytest.mark.mpi, pytest.mark.skipif(
    not HOSTS, reason="no second host: set BLINKRUN_TEST_HOSTS (see tests/multihost/netns_sshd.sh)")]


@pytest.fixture(scope="module")
def hosts():
    mpi_args = os.environ.get(f"BLINKRUN_TEST_MPI_ARGS_{detect().family.upper()}", "")
    return ["-H", HOSTS, "--mpi-args", mpi_args]


RANKS = ("import socket; from mpi4py import MPI; c = MPI.COMM_WORLD; "
         "print(c.rank, c.size, c.allreduce(c.rank), socket.gethostname())")


def test_ranks_span_two_hosts(hosts):
    proc = run_blinkrun(["-np", "4", *hosts, PY, "-c", RANKS], timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = sorted(l for l in proc.stdout.splitlines() if "<stdout>:" in l)
    assert [l.split()[:4] for l in lines] == [[f"[{r}]<stdout>:", str(r), "4", "6"] for r in range(4)]
    hosts = [l.split()[4] for l in lines]
    assert hosts[0] == hosts[1] != hosts[2] == hosts[3]


def test_a_failure_on_the_remote_host_is_named_with_its_host(hosts):
    script = ("import socket; from mpi4py import MPI; c = MPI.COMM_WORLD; c.barrier()\n"
              "if c.rank == 3: raise RuntimeError('remote rank fails on ' + socket.gethostname())\n"
              "c.allreduce(1)")
    proc = run_blinkrun(["-np", "4", *hosts, PY, "-c", script], timeout=120)
    assert proc.returncode == 1, proc.stderr
    remote = proc.stderr.split("remote rank fails on ")[1].split()[0]
    assert f"rank 3 (host {remote}) failed first" in proc.stderr and remote != os.uname().nodename
