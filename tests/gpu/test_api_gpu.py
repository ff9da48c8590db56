"""The public API on cupy arrays, ranks sharing this machine's GPU(s), through mpirun: the runtime,
the schedule runner and the cuda transport together on a real device (streams, events, IPC and
the kernels), on the planner's NVSwitch trees of an HGX H100 (device ids virtual), and on two
pretend hosts (the three-phase all-reduce, its cross-host phase over MPI); then data-parallel
training through it, checked against training on the whole batch. The same case scripts run
under the fake CuPy on every CI run (tests/mpi/test_api_fake_cupy.py). One launch per
configuration, each case a test."""
import os

import pytest

from harness import case_names, launch

HERE = os.path.dirname(os.path.abspath(__file__))
API = os.path.join(HERE, "api_script.py")
TRAIN = os.path.join(HERE, "train_script.py")
CASES = [(1, "hgx-h100", 1), (2, "hgx-h100", 1), (4, "hgx-h100", 1), (4, "2xhgx-h100", 2)]


def _env(topology, hosts):
    return {"BLINKFLOW_TOPOLOGY": topology, "BLINKFLOW_SPLIT_HOSTS": str(hosts if hosts > 1 else 0)}


@pytest.mark.mpi
@pytest.mark.parametrize("n,topology,hosts", CASES)
@pytest.mark.parametrize("case", case_names(API))
def test_public_api_on_gpu(n, topology, hosts, case):
    launch(n, API, env=_env(topology, hosts), timeout=300).expect(case)


@pytest.mark.mpi
@pytest.mark.parametrize("n,topology,hosts", CASES[1:])
@pytest.mark.parametrize("case", case_names(TRAIN))
def test_training_on_gpu(n, topology, hosts, case):
    launch(n, TRAIN, env=_env(topology, hosts), timeout=300).expect(case)
