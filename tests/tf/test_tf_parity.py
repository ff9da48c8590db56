"""Horovod's TensorFlow API, row by row of issue 17 (parity_script.py): process sets, TF1-style
graphs run by a Session, rank/size ops, build queries, deprecated arguments, Partial*,
IndexedSlices, error classes, scale factors, reduce-scatter, in-place broadcast, local gradients,
gradient aggregation; at 2 and 3 ranks on the host route, and at 2 ranks on the device route
(TF tensors crossing by DLPack into the cuda backend under the fake CuPy, TF1 graphs included)."""
import pytest

import tf_jobs

pytest.importorskip("tensorflow")


@pytest.mark.mpi
@pytest.mark.parametrize("job, case", tf_jobs.params("parity_script.py"))
def test_horovod_tensorflow_api_parity(job, case):
    tf_jobs.expect(job, "parity_script.py", case)
