"""Multi-process tests of training whose step XLA compiles (xla_script.py): at 2 ranks with one
bucket, at 3 with a bucket per gradient, so a compiled step holds one submission or many chained
ones."""
import pytest

import tf_jobs

pytest.importorskip("tensorflow")


@pytest.mark.mpi
@pytest.mark.tf
@pytest.mark.parametrize("job, case", tf_jobs.params("xla_script.py"))
def test_xla_compiled_training(job, case):
    tf_jobs.expect(job, "xla_script.py", case)
