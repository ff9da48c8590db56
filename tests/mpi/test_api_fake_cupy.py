"""The public API on cupy arrays at 1, 2 and 4 ranks (and two pretend hosts: the three-phase
all-reduce), and data-parallel training through it, under the fake CuPy. The same case scripts
run on a real GPU in tests/gpu/test_api_gpu.py; here they run on every CI run (what the fake
cannot show, real stream and event ordering and the kernels on a device, only the GPU tier can).
One launch per configuration, each case a test."""
import os

import pytest

from harness import case_names, fake_cupy_env, launch

GPU_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpu")
API = os.path.join(GPU_TESTS, "api_script.py")
TRAIN = os.path.join(GPU_TESTS, "train_script.py")


def _env(n, hosts):
    # One host: a topology of n devices; two pretend hosts: the hosts discovery makes of the split.
    return fake_cupy_env(**({"BLINKFLOW_TOPOLOGY": f"cpu-host:{n}"} if hosts == 1 else {"BLINKFLOW_SPLIT_HOSTS": str(hosts)}))


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("n,hosts,algorithm", [(1, 1, "auto"), (2, 1, "auto"), (4, 1, "auto"), (4, 2, "auto"),
                                               (2, 1, "device"), (4, 2, "device")])
@pytest.mark.parametrize("case", case_names(API))
def test_public_api_on_fake_cupy(n, hosts, algorithm, case):
    """``auto`` (the host-driven runner on GPUs) and the device executor, as BLINKFLOW_ALGORITHM asks."""
    launch(n, API, env=dict(_env(n, hosts), BLINKFLOW_ALGORITHM=algorithm)).expect(case)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("n,hosts", [(2, 1), (4, 2)])
@pytest.mark.parametrize("case", case_names(TRAIN))
def test_training_on_fake_cupy(n, hosts, case):
    launch(n, TRAIN, env=_env(n, hosts)).expect(case)
