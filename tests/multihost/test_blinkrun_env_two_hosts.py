"""horovodrun's environment and network flags across two hosts: every variable of blinkrun's
environment but the left-out ones reaches the ranks on bfb; ``--network-interface``, ``-p`` and
``-i`` reach MPI's launch."""
import sys

import pytest

from blinkrun_helpers import blinkrun_argv
from blinkflow.bench.cluster import SSH_PORT

pytestmark = [pytest.mark.mpi, pytest.mark.multihost, pytest.mark.timeout(120)]

SHOW_ENV = ("import os; from mpi4py import MPI; c = MPI.COMM_WORLD; "
            "print(c.rank, MPI.Get_processor_name(), os.environ.get('BF_USER_VAR'), os.environ.get('OLDPWD'), "
            "c.allreduce(c.rank))")


def blinkrun(cluster, args, env=None, timeout=90):
    return cluster.run_on("bfa", blinkrun_argv() + ["-np", "4", "-H", "bfa:2,bfb:2", *args],
                          env=cluster.env(env), timeout=timeout)


def rows(proc):
    return sorted(line.split()[1:] for line in proc.stdout.splitlines() if "<stdout>:" in line)


def test_a_user_variable_reaches_the_ranks_on_the_other_host(cluster):
    proc = blinkrun(cluster, [sys.executable, "-c", SHOW_ENV],
                    env={"BF_USER_VAR": "from-bfa", "OLDPWD": "/left/out"})
    assert proc.returncode == 0, proc.stderr
    got = {(rank, host, var) for rank, host, var, *_ in rows(proc)}
    assert got == {("0", "bfa", "from-bfa"), ("1", "bfa", "from-bfa"),
                   ("2", "bfb", "from-bfa"), ("3", "bfb", "from-bfa")}, proc.stdout
    # OLDPWD is left out: the ranks on bfb do not get the launching shell's
    assert all(oldpwd != "/left/out" for _, host, _, oldpwd, _ in rows(proc) if host == "bfb"), proc.stdout


def test_network_interface_and_ssh_flags_reach_mpi(cluster):
    key = cluster._path("client_key")
    proc = blinkrun(cluster, ["--network-interface", "veth0", "-p", str(SSH_PORT), "-i", key, "--verbose",
                              sys.executable, "-c", SHOW_ENV])
    assert proc.returncode == 0, proc.stderr
    assert [r[-1] for r in rows(proc)] == ["6"] * 4, proc.stdout
    assert "btl_tcp_if_include veth0" in proc.stderr and f"plm_ssh_args '-p {SSH_PORT} -i {key}'" in proc.stderr
    # and they are used: no such interface, or the wrong port, stops the job with an error
    for args in (["--network-interface", "nosuchnic0"], ["-p", "1"]):
        proc = blinkrun(cluster, [*args, sys.executable, "-c", SHOW_ENV], timeout=60)
        assert proc.returncode != 0 and not rows(proc), (args, proc.stdout, proc.stderr)
