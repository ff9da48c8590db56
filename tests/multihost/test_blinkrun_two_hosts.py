"""``blinkrun -H bfa:2,bfb:2`` (and ``--hostfile``) through mpirun's ssh launch, started on host bfa
like a user would."""
import sys

import pytest

from blinkrun_helpers import blinkrun_argv

pytestmark = [pytest.mark.mpi, pytest.mark.multihost, pytest.mark.timeout(90)]

RANK_LINE = ("from mpi4py import MPI; c = MPI.COMM_WORLD; "
             "print(c.rank, c.size, MPI.Get_processor_name(), c.allreduce(c.rank))")


def blinkrun(cluster, args, hosts=("-H", "bfa:2,bfb:2")):
    return cluster.run_on("bfa", blinkrun_argv() + ["-np", "4", *hosts, *args], env=cluster.env(), timeout=75)


@pytest.mark.parametrize("spec", ["-H", "--hostfile"])
def test_blinkrun_tags_every_rank_of_both_hosts(cluster, tmp_path, spec):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# Open MPI's format\nbfa slots=2\nbfb slots=2\n")
    hosts = ("-H", "bfa:2,bfb:2") if spec == "-H" else ("--hostfile", str(hostfile))
    proc = blinkrun(cluster, [sys.executable, "-c", RANK_LINE], hosts)
    assert proc.returncode == 0, proc.stderr
    lines = sorted(line.split() for line in proc.stdout.splitlines() if "<stdout>:" in line)
    assert lines == [[f"[{r}]<stdout>:", str(r), "4", "bfa" if r < 2 else "bfb", "6"] for r in range(4)]


@pytest.mark.parametrize("failure, status", [("raise RuntimeError('remote rank fails')", 1),
                                             ("sys.exit(7)", 7)])
def test_blinkrun_names_the_failed_rank_on_the_remote_host(cluster, failure, status):
    # rank 3 lives on bfb; the others wait in a collective it never joins
    script = ("import sys; from mpi4py import MPI; c = MPI.COMM_WORLD; c.barrier()\n"
              f"if c.rank == 3: {failure}\n"
              "c.allreduce(1)")
    proc = blinkrun(cluster, [sys.executable, "-c", script])
    assert proc.returncode == status, proc.stderr
    assert "blinkrun: rank 3 (host bfb) failed first" in proc.stderr, proc.stderr
