"""What ``blinkflow.tensorflow.init()`` does to TensorFlow's GPUs before TF initialises them.

- **Memory growth.** TensorFlow's allocator takes nearly all of a GPU's memory when it first
  touches it, after which the cuda backend's receive arena and CuPy's pool cannot allocate. Where
  the cuda backend is usable (:func:`blinkflow.placement.cuda_usable`), init()
  makes TF grow its memory as needed instead (``set_memory_growth``), unless
  ``BLINKFLOW_TF_MEMORY_GROWTH=0``.
- **The rank's GPU.** Local rank k drives CUDA device k (:mod:`blinkflow.topology.visible_devices`),
  so TF is shown ``gpus[k]`` only, as Horovod's recipe does by hand
  (``tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")``; a script that still does
  it sets the same device again). ``BLINKFLOW_PIN_GPUS=0`` leaves TF's devices alone.

Both must happen before TF initialises its GPUs (its first op on one); afterwards TF refuses
them, and init() says so once instead of failing.
"""
from __future__ import annotations

import logging
from typing import List, Optional

from ..config import Config
from ..placement import cuda_usable

log = logging.getLogger("blinkflow")


def setup_tf_gpus(tf, config: Config, local_rank: int, cupy_sees_gpu: bool) -> List[str]:
    """Apply the settings above to ``tf``; the lines logged (empty when TF sees no GPU)."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return []
    done: List[str] = []
    if config.pin_gpus and len(gpus) > 1 and local_rank < len(gpus):
        done += _apply(lambda: tf.config.set_visible_devices(gpus[local_rank], "GPU"),
                       f"TensorFlow shown only {gpus[local_rank].name} (local rank {local_rank} drives CUDA device "
                       f"{local_rank}; BLINKFLOW_PIN_GPUS=0 leaves TF's devices alone)",
                       "could not pin TensorFlow to this rank's GPU")
    if config.tf_memory_growth and cuda_usable(config, cupy_sees_gpu):
        def grow():
            for gpu in gpus:
                if not tf.config.experimental.get_memory_growth(gpu):
                    tf.config.experimental.set_memory_growth(gpu, True)
        done += _apply(grow, "TensorFlow grows its GPU memory as needed, leaving room for the cuda backend's "
                             "buffers (BLINKFLOW_TF_MEMORY_GROWTH=0 keeps TF's allocator as it is)",
                       "could not make TensorFlow grow its GPU memory; the cuda backend may fail to allocate "
                       "(set TF_FORCE_GPU_ALLOW_GROWTH=true)")
    return done


def _apply(action, did: str, failed: str) -> List[str]:
    try:
        action()
    except RuntimeError as e:   # "... cannot be modified after being initialized"
        line = f"{failed}: TensorFlow initialised its GPUs before blinkflow.init() ({e}); call init() first"
        log.warning(line)
        return [line]
    log.info(did)
    return [did]


def prepare(config: Optional[Config] = None, local_rank: Optional[int] = None) -> List[str]:
    """:func:`setup_tf_gpus` for this process (called by ``blinkflow.tensorflow.init``)."""
    import tensorflow as tf

    from ..backends.cuda.device import is_available
    from ..config import get_config
    from ..runtime import api
    config = config or get_config()
    return setup_tf_gpus(tf, config, api.local_rank() if local_rank is None else local_rank,
                         is_available())
