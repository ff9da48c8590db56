"""The public API on cupy arrays at 1, 2 and 4 ranks (and two pretend hosts: the three-phase
all-reduce), and data-parallel training through it, under the fake CuPy. The same workers run on
a real GPU in tests/gpu/test_api_gpu.py; here they run on every CI run (what the fake cannot show,
real stream and event ordering and the kernels on a device, only the GPU tier can)."""
import os

import pytest

from harness import fake_cupy_env, run_ranks

GPU_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpu")


def _env(n, hosts):
    # One host: a topology of n devices; two pretend hosts: the hosts discovery makes of the split.
    return fake_cupy_env(**({"BLINKFLOW_TOPOLOGY": f"cpu-host:{n}"} if hosts == 1 else {"BLINKFLOW_SPLIT_HOSTS": str(hosts)}))


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("n,hosts,algorithm", [(1, 1, "auto"), (2, 1, "auto"), (4, 1, "auto"), (4, 2, "auto"),
                                               (2, 1, "device"), (4, 2, "device")])
def test_public_api_on_fake_cupy(n, hosts, algorithm):
    """``auto`` (the host-driven runner on GPUs) and the device executor, as BLINKFLOW_ALGORITHM asks."""
    env = dict(_env(n, hosts), BLINKFLOW_ALGORITHM=algorithm)
    out = run_ranks(n, ["python", os.path.join(GPU_TESTS, "api_worker.py")], timeout=240, env=env)
    assert f"API OK {n} ranks" in out.stdout, out.stdout + out.stderr


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("n,hosts", [(2, 1), (4, 2)])
def test_training_on_fake_cupy(n, hosts):
    out = run_ranks(n, ["python", os.path.join(GPU_TESTS, "train_worker.py")], timeout=240, env=_env(n, hosts))
    assert f"TRAIN OK {n} ranks" in out.stdout, out.stdout + out.stderr
