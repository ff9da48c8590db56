"""Adasum through the runtime (adasum_script.py) at 1, 2, 4 ranks, and refused at 3."""
import os

import pytest

from harness import case_names, fake_cupy_env, launch

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "adasum_script.py")


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("case", case_names(CASES))
def test_adasum(case, n):
    launch(n, CASES, timeout=240).expect(case)


@pytest.mark.mpi
def test_adasum_on_fake_cupy():
    """GPU tensors (the fake CuPy) take Adasum's host path on the cuda backend."""
    env = fake_cupy_env(BLINKFLOW_TOPOLOGY="cpu-host:2")
    launch(2, CASES, timeout=240, env=env).expect("gpu_tensors_take_the_host_path")
