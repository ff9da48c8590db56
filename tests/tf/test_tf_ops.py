"""Multi-process tests of the TF collectives, their gradients, DistributedGradientTape,
broadcast_variables and error mapping, eagerly and in tf.function (ops_script.py): on the host
route (the cpu backend) at 2 and 4 ranks, and on the device route at 2 and 3 ranks, where TF
tensors cross by DLPack into the cuda backend (its fake CuPy here) without a host conversion."""
import pytest

import tf_jobs

pytest.importorskip("tensorflow")


@pytest.mark.mpi
@pytest.mark.parametrize("job, case", tf_jobs.params("ops_script.py"))
def test_tf_ops(job, case):
    tf_jobs.expect(job, "ops_script.py", case)
