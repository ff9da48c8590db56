"""TensorFlow's tensors play GPU tensors under the fake: TF's DLPack speaks CUDA capsules.

TensorFlow here has no GPU, so its capsules point at host memory, which is the fake's device
memory too. This relabels them the way TensorFlow on a GPU labels them: device type CUDA and
TF's *logical* device id, which is not always the CUDA ordinal of the memory:

``FAKE_CUPY_TF_DEVICE``     the CUDA ordinal TF's tensors live on (default: the local rank's,
                            ``OMPI_COMM_WORLD_LOCAL_RANK`` modulo the visible devices)
``FAKE_CUPY_TF_SEES_ONE=1`` TF sees only that GPU, as after Horovod's
                            ``tf.config.set_visible_devices(gpus[local_rank])``: its capsules are
                            labelled 0, and a capsule handed to TF must say 0 too

Outbound capsules register their memory's range, so ``cudaPointerGetAttributes`` answers the
real device. Inbound capsules (``tf.experimental.dlpack.from_dlpack``) must be CUDA capsules
whose label names a GPU TF has, the memory's: TF refuses others; the memory is marked as read
by TF's stream until the device is synchronised (:mod:`._pool`).
"""
import os
import sys

from . import _devices, _dlpack

_installed = []


def tf_ordinal() -> int:
    wanted = os.environ.get("FAKE_CUPY_TF_DEVICE")
    if wanted is None:
        wanted = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")) % _devices.count()
    return _devices.check(int(wanted))


def _sees_one() -> bool:
    return os.environ.get("FAKE_CUPY_TF_SEES_ONE") == "1"


def label_of(ordinal: int) -> int:
    """TF's logical id for a CUDA ordinal (only when TF sees that GPU)."""
    if not _sees_one():
        return ordinal
    if ordinal != tf_ordinal():
        raise ValueError(f"fake TensorFlow sees only GPU {tf_ordinal()} (as GPU:0), not GPU {ordinal}")
    return 0


def install() -> None:
    tf = sys.modules.get("tensorflow")
    if _installed or tf is None:
        return
    dlpack = tf.experimental.dlpack
    to_host, from_host = dlpack.to_dlpack, dlpack.from_dlpack

    def to_dlpack(tensor):
        capsule = to_host(tensor)
        ordinal = tf_ordinal()
        nbytes = int(tensor.shape.num_elements() or 0) * tensor.dtype.size
        _devices.memory.add(_dlpack.data_pointer(capsule), nbytes, ordinal)
        return _dlpack.relabel(capsule, _dlpack.KDL_CUDA, label_of(ordinal))

    def from_dlpack(capsule):
        kind, label = _dlpack.device(capsule)
        if kind != _dlpack.KDL_CUDA:
            raise ValueError(f"fake TensorFlow (a GPU build here) got a DLPack capsule of device type {kind}")
        ordinal = _devices.memory.find(_dlpack.data_pointer(capsule))
        if ordinal is not None and label != label_of(ordinal):
            raise ValueError(f"fake TensorFlow: the capsule says GPU:{label}, but its memory is on CUDA device "
                             f"{ordinal}, which TensorFlow calls GPU:{label_of(ordinal)}")
        from . import _pool

        _pool.tf_took(_dlpack.data_pointer(capsule))  # TF's stream may read it until a device synchronize
        return from_host(_dlpack.relabel(capsule, _dlpack.KDL_CPU, 0))

    dlpack.to_dlpack, dlpack.from_dlpack = to_dlpack, from_dlpack
    _installed.append(True)
