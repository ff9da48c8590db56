"""The cuda backend's device executor under the fake CuPy, at 1, 2 and 4 ranks and two pretend
hosts: the real backend code (tables, memory through CUDA IPC, one launch, one event, the proxy
thread for network edges) with blinkflow's numpy interpreter standing in for the kernel; results
bitwise the host-driven runner's, the timeline naming the algorithm, and a call one rank skips
ending in a BackendError on the others instead of a hang (one launch of
tests/gpu/device_executor_script.py per configuration, each case a test). Then the loopback
mode, one process running 2, 4 and 8 virtual ranks' blocks in one launch, bitwise the runner's."""
import os

import pytest

from harness import case_names, fake_cupy_env, launch, launch_alone

GPU_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpu")
WORKER = os.path.join(GPU_TESTS, "device_executor_script.py")
LOOPBACK_WORKER = os.path.join(GPU_TESTS, "loopback_script.py")


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("n,hosts", [(1, 1), (2, 1), (4, 1), (4, 2)])
@pytest.mark.parametrize("case", case_names(WORKER))
def test_device_executor_bitwise_the_runner(n, hosts, case):
    launch(n, WORKER, args=[str(hosts)], env=fake_cupy_env(), timeout=240).expect(case)


@pytest.mark.slow
@pytest.mark.parametrize("nranks", [2, 4, 8])
@pytest.mark.parametrize("case", case_names(LOOPBACK_WORKER))
def test_loopback_bitwise_the_runner(nranks, case):
    """All virtual ranks' blocks in one launch (an H100's 132 SMs hold 8 ranks' 64-96 blocks)."""
    launch_alone(LOOPBACK_WORKER, args=[str(nranks)], env=fake_cupy_env(FAKE_CUPY_SMS="132"), timeout=240).expect(case)
