"""Multi-process tests: a gradient is identified by its variable whatever differs between the
ranks' steps (gradient_identity_script.py), at 2 ranks with one bucket and at 3 with a bucket per
gradient."""
import pytest

import tf_jobs

pytest.importorskip("tensorflow")


@pytest.mark.mpi
@pytest.mark.tf
@pytest.mark.parametrize("job, case", tf_jobs.params("gradient_identity_script.py"))
def test_gradients_are_matched_by_variable(job, case):
    tf_jobs.expect(job, "gradient_identity_script.py", case)
