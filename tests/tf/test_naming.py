"""Multi-process tests of unnamed collectives inside tf.function control flow (naming_script.py):
2 ranks, rank 0 tracing unrelated functions first, under a 30 s stall shutdown."""
import pytest

import tf_jobs

pytest.importorskip("tensorflow")


@pytest.mark.mpi
@pytest.mark.tf
@pytest.mark.parametrize("job, case", tf_jobs.params("naming_script.py"))
def test_unnamed_collectives_in_control_flow_pair_across_ranks(job, case):
    tf_jobs.expect(job, "naming_script.py", case)
