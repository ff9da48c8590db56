"""Multi-process tests of model.fit with DistributedOptimizer and the callbacks (fit_script.py):
at 2 ranks with every gradient a bucket of its own, at 4 ranks (the variants that depend on the
number of ranks) with these small models' gradients in one bucket, and on the device route,
where the gradients cross by DLPack into the cuda backend (its fake CuPy here)."""
import pytest

import tf_jobs

pytest.importorskip("tensorflow")


@pytest.mark.mpi
@pytest.mark.parametrize("job, case", tf_jobs.params("fit_script.py"))
def test_fit_optimizer_callbacks_and_saving(job, case):
    tf_jobs.expect(job, "fit_script.py", case)
