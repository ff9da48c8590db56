"""One run of the demo (``examples/keras_mnist.py``, 4 epochs at 2 ranks) that its tests read:
the example's own output (accuracy, progress bar, checkpoints: test_examples.py) and the count of
data iterators torn down at epoch starts (epoch_start_script.py wraps it: test_epoch_start.py).
The wrapper only watches (a callback, a finalizer on tf.data iterators); the training is the
example's."""
import atexit
import functools
import os
import shutil
import tempfile

from harness import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "keras_mnist.py")
EPOCHS = 4


@functools.lru_cache(maxsize=1)
def demo():
    """(the job's stdout, its checkpoint folder)."""
    folder = tempfile.mkdtemp(prefix="blinkflow-demo-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    out = run_ranks(2, ["python", os.path.join(HERE, "epoch_start_script.py"), EXAMPLE, "--epochs", str(EPOCHS),
                        "--checkpoint-dir", folder], timeout=400).stdout
    return out, folder
