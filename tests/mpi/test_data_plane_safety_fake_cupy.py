"""The cuda backend's rare races and failure paths, made certain under the fake CuPy: the
counters' memset has run before a peer may post (cudaMemset is asynchronous), a launch that fails
leaves the next call clean, a grid that cannot be co-resident fails at once on every rank (or runs
on the runner where the policy chose the device executor), close frees nothing a peer still maps,
ranks on MIG instances exchange over MPI instead of CUDA IPC, and a result TensorFlow let go of is
not reused before a device synchronize. One launch of tests/gpu/data_plane_safety_script.py per
setting runs its cases one after another, each with a backend of its own: a failure path a case
drives must leave the process fit for the next (a hang ends the launch at its timeout and fails
the cases it had not finished)."""
import os

import pytest

from harness import case_names, fake_cupy_env, launch, launch_alone

GPU_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpu")
WORKER = os.path.join(GPU_TESTS, "data_plane_safety_script.py")
TF_WORKER = os.path.join(GPU_TESTS, "tf_result_lifetime_script.py")
MIG_CASES = [c for c in case_names(WORKER) if "mig" in c]
H100_CASES = [c for c in case_names(WORKER) if c not in MIG_CASES]


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("n,setting", [(1, "h100"), (2, "h100"), (4, "h100"), (4, "h100x2")])
@pytest.mark.parametrize("case", H100_CASES)
def test_device_executor_safety(n, setting, case):
    launch(n, WORKER, args=[setting], env=fake_cupy_env(), timeout=240, cases=H100_CASES).expect(case)


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("case", MIG_CASES)
def test_mig_instances_exchange_over_mpi(n, case):
    """Two MIG instances; at 3 ranks, ranks 0 and 2 share the first (IPC between them)."""
    env = fake_cupy_env(FAKE_CUPY_MIG="1", FAKE_CUPY_DEVICES="2")
    launch(n, WORKER, args=["mig"], env=env, timeout=240, cases=MIG_CASES).expect(case)


@pytest.mark.tf
@pytest.mark.parametrize("case", case_names(TF_WORKER))
def test_results_lent_to_tensorflow(case):
    launch_alone(TF_WORKER, env=fake_cupy_env(), timeout=240).expect(case)
