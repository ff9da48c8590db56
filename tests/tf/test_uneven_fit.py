"""Multi-process tests: model.fit on shards with different numbers of batches (uneven_fit_script.py), at 2 and 3 ranks."""
import pytest

import tf_jobs

pytest.importorskip("tensorflow")


@pytest.mark.mpi
@pytest.mark.tf
@pytest.mark.parametrize("job, case", tf_jobs.params("uneven_fit_script.py"))
def test_fit_with_uneven_shards(job, case):
    tf_jobs.expect(job, "uneven_fit_script.py", case)
