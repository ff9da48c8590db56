"""TF tensors on one GPU per rank through the cuda backend, under the fake CuPy with a GPU per
rank (devices_tf_script.py): DLPack device ids under Horovod's
``set_visible_devices(gpus[local_rank])``, and a ``tf.function`` crossing TF can keep on the GPU."""
import pytest

import tf_jobs

pytest.importorskip("tensorflow")


@pytest.mark.mpi
@pytest.mark.tf
@pytest.mark.parametrize("job, case", tf_jobs.params("devices_tf_script.py"))
def test_tf_tensors_on_a_gpu_per_rank(job, case):
    tf_jobs.expect(job, "devices_tf_script.py", case)
