"""SyncBatchNormalization, Adasum in TF and BestModelCheckpoint under mpirun (layers_cases.py)."""
import os

import pytest

from harness import case_names, launch

pytest.importorskip("tensorflow")
HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "layers_cases.py")


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("case", case_names(CASES))
def test_layers(case, n):
    launch(n, CASES, timeout=400).expect(case)
