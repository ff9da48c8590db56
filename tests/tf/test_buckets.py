"""Multi-process tests of gradient buckets (buckets_script.py): overlap with backprop inside a
tf.function, matching by name in any submission order, no deadlock with one inter-op thread,
errors raised at the wait; on the host route at 2 and 4 ranks and on the device route (the fake
CuPy) at 2, every gradient a bucket of its own."""
import pytest

import tf_jobs

pytest.importorskip("tensorflow")


@pytest.mark.mpi
@pytest.mark.parametrize("job, case", tf_jobs.params("buckets_script.py"))
def test_buckets(job, case):
    tf_jobs.expect(job, "buckets_script.py", case)
