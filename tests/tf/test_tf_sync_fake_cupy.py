"""The TF crossing's device synchronisation before TensorFlow sees results, under the fake CuPy whose
work runs deferred (sync_tf_script.py): without it TensorFlow reads memory our streams have not
written yet, and may reuse inputs our kernels still read."""
import pytest

import tf_jobs

pytest.importorskip("tensorflow")


@pytest.mark.mpi
@pytest.mark.tf
@pytest.mark.parametrize("job, case", tf_jobs.params("sync_tf_script.py"))
def test_results_reach_tensorflow_only_after_our_streams_ran(job, case):
    tf_jobs.expect(job, "sync_tf_script.py", case)
