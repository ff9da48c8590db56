"""TensorFlow GPU tensors <-> cupy arrays through DLPack, without copying.

The TF bindings (``blinkflow.tensorflow.crossing.arrays``) call these so a ``tf.Tensor`` on a GPU reaches
the cuda backend as a cupy view of the same memory (gradients go from the optimizer into the fusion
buffer without a host round trip), and results go back the same way. CuPy
refuses a capsule of host memory; the TF crossing places tensors on the GPU first.

CuPy has no bfloat16 dtype: the TF crossing widens a bfloat16 tensor to float32 before it crosses and
narrows the result after (``blinkflow.tensorflow.crossing.arrays``).

Device ids: TF labels a capsule with its logical id, CuPy with the CUDA ordinal; the two differ
once TF sees fewer GPUs than the process (``tf.config.set_visible_devices``). A capsule from TF is
relabelled with the device its memory really lives on (``cudaPointerGetAttributes``), and the
pairing is remembered, so a capsule going back to TF carries TF's id for that GPU
(:mod:`.capsule`).

Ordering: the legacy DLPack capsule TF produces carries no stream, and TF computes on its own
streams, which it does not expose: no event can order our work after TF's or TF's after ours. So
with ``sync=True`` (the default) the array's device — the memory's real one — is synchronised
before the array is handed on, which orders TF's pending work before ours, and before a result
goes back to TF. Callers that already synchronised (e.g. a whole fused batch at once) pass
``sync=False``.

Lifetime: a result handed to TF is a block of CuPy's memory pool. When TF lets go of the tensor
(at host time), CuPy would return the block to its pool at once and hand it to the next
allocation, while a kernel TF queued on its own stream may still read it. So the array is held
until the next device synchronize that starts after TF let go (:func:`synchronize`, which every
crossing in either direction calls): that synchronize waits for TF's streams too, and then the
block may be reused.
"""
from __future__ import annotations

import collections
import weakref
from typing import Deque, Dict

from . import capsule as dl

_tf_label: Dict[int, int] = {}
"""CUDA ordinal -> TensorFlow's logical id of that GPU, as TF's own capsules showed it."""
_let_go: Dict[int, Deque] = collections.defaultdict(collections.deque)
"""CUDA ordinal -> results TF let go of, held until a device synchronize (see the module).
Filled from finalizers, which run on any thread at any moment: only deque appends and pops."""


def synchronize(cupy, ordinal: int) -> None:
    """Synchronise the device ``ordinal`` (TF's streams included), then release the results TF
    had let go of before it started."""
    queue = _let_go[ordinal]
    held = [queue.popleft() for _ in range(len(queue))]
    cupy.cuda.Device(ordinal).synchronize()
    held.clear()


def _held_until_synchronized(ordinal: int, array) -> None:
    _let_go[ordinal].append(array)


def tf_to_cupy(tensor, sync: bool = True):
    """A cupy array viewing ``tensor``'s GPU memory."""
    import cupy
    import tensorflow as tf

    capsule = tf.experimental.dlpack.to_dlpack(tensor)
    kind, label = dl.device(capsule)
    if kind == dl.KDL_CUDA:
        ordinal = real_device(cupy, dl.data_pointer(capsule), label)
        _tf_label[ordinal] = label
        dl.set_device_id(capsule, ordinal)
    array = _from_capsule(cupy, capsule)
    if sync:
        synchronize(cupy, array.device.id)
    return array


def real_device(cupy, pointer: int, label: int) -> int:
    """The CUDA ordinal of the GPU ``pointer`` lives on (``label`` where CUDA cannot say)."""
    if not pointer:  # an empty tensor: no memory to ask about
        return label
    attributes = cupy.cuda.runtime.pointerGetAttributes(pointer)
    device = int(getattr(attributes, "device", -1))
    return device if getattr(attributes, "type", 0) in (2, 3) and device >= 0 else label  # device or managed


def tf_label(ordinal: int) -> int:
    """TensorFlow's logical id of the GPU CUDA calls ``ordinal``: as TF's capsules showed it, else
    from TF's visible devices (whose physical ids are CUDA ordinals), else the ordinal."""
    known = _tf_label.get(ordinal)
    if known is not None:
        return known
    import tensorflow as tf

    visible = [int(d.name.rsplit(":", 1)[-1]) for d in tf.config.get_visible_devices("GPU")]
    return visible.index(ordinal) if ordinal in visible else ordinal


def cupy_to_tf(array, sync: bool = True):
    """A ``tf.Tensor`` viewing ``array``'s memory."""
    import cupy
    import tensorflow as tf

    if sync:
        synchronize(cupy, array.device.id)  # our kernels ran on our streams
    # TF holds ``lent`` (through the capsule); when TF lets go of it, ``array`` stays held
    # until the next device synchronize (see the module).
    lent = array.view()
    weakref.finalize(lent, _held_until_synchronized, array.device.id, array)
    capsule = lent.toDlpack() if hasattr(lent, "toDlpack") else lent.__dlpack__()
    dl.set_device_id(capsule, tf_label(array.device.id))
    return tf.experimental.dlpack.from_dlpack(capsule)


def _from_capsule(cupy, capsule):
    # CuPy >= 10 spells it from_dlpack (and still takes legacy capsules); older CuPy fromDlpack.
    from_dlpack = getattr(cupy, "from_dlpack", None)
    if from_dlpack is not None:
        try:
            return from_dlpack(capsule)
        except TypeError:
            pass
    return cupy.fromDlpack(capsule)
