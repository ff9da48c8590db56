"""What one rank alone gets wrong in the TensorFlow API fails on every rank and the next
collectives pair (refusal_script.py), at 2 and 3 ranks."""
import pytest

import tf_jobs

pytest.importorskip("tensorflow")


@pytest.mark.mpi
@pytest.mark.parametrize("job, case", tf_jobs.params("refusal_script.py"))
def test_tf_refusals(job, case):
    tf_jobs.expect(job, "refusal_script.py", case)
