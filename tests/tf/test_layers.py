"""SyncBatchNormalization, Adasum in TF and BestModelCheckpoint under mpirun (layers_script.py)
at 1, 2 and 3 ranks, in the TF jobs that run it (tests/tf/tf_jobs.py)."""
import pytest

pytest.importorskip("tensorflow")

import tf_jobs  # noqa: E402


@pytest.mark.mpi
@pytest.mark.parametrize("job, case", tf_jobs.params("layers_script.py"))
def test_layers(job, case):
    tf_jobs.expect(job, "layers_script.py", case)
