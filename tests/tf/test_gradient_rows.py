"""Horovod's TensorFlow semantics (gradient_rows_script.py) at 2 and 3 ranks, in the TF jobs that
run it (tests/tf/tf_jobs.py); a stalled collective ends its job within the job's stall shutdown
time."""
import pytest

pytest.importorskip("tensorflow")

import tf_jobs  # noqa: E402


@pytest.mark.mpi
@pytest.mark.parametrize("job, case", tf_jobs.params("gradient_rows_script.py"))
def test_horovod_tensorflow_rows(job, case):
    tf_jobs.expect(job, "gradient_rows_script.py", case)
