"""Horovod TF2 scripts on blinkflow, each a case of a TF job (tests/tf/tf_jobs.py): the script
runs as ``__main__`` in the rank's process, which imported TensorFlow once for the whole job.

- horovod_idioms_script.py, a script of our own in the idioms of Horovod's examples
  (``opt.variables()``, ``compile(experimental_run_tf_function=False)``, the callbacks, ``.h5``
  checkpoints, ``op=hvd.Adasum``, SyncBatchNormalization, BestModelCheckpoint), ported by
  ``horovod_port.port`` alone: the import lines and Keras 3's removal of
  ``experimental_run_tf_function``.
- The ports in examples/horovod/ (the README's commands: Horovod 0.28.1's files changed by
  ``horovod_port.example_port`` alone, which tests/unit/test_horovod_example_ports.py holds them
  to), as they are, under ``horovod_port.capped`` (fewer steps and epochs); the benchmarks take a
  small model from their own command line.

Each case runs in a directory of its own on each rank. Only rank 0 saves (Horovod's idiom), so
rank 0's directory holds the checkpoints and every other rank's stays empty.
"""
import contextlib
import io
import os
import re
import shutil
import sys
import tempfile

from script_checks import RANK, SIZE, check  # (sets TF threads, before keras)

from harness import run_cases  # noqa: E402
from horovod_port import BENCHMARK_ARGS, capped, run_script  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "horovod")
IDIOMS = os.path.join(HERE, "horovod_idioms_script.py")


def run(script, argv=(), ported=False, steps=0, epochs=0):
    """(what the script printed, the files it left in its directory) on this rank; the
    directory is removed."""
    where, out, back = tempfile.mkdtemp(prefix="horovod-example-"), io.StringIO(), os.getcwd()
    os.chdir(where)
    try:
        with capped(steps, epochs), contextlib.redirect_stdout(out):
            run_script(script, list(argv), ported)
        return out.getvalue(), sorted(os.listdir(where))
    except BaseException:
        sys.stdout.write(out.getvalue()[-4000:])  # what it printed before it failed, for the job's log
        raise
    finally:
        os.chdir(back)
        shutil.rmtree(where, ignore_errors=True)


def saved_by_rank_0(files, want):
    check(f"rank {RANK}'s checkpoints", files == (want if RANK == 0 else []), files)


def idioms(argv):
    out, files = run(IDIOMS, argv, ported=True)
    check("the custom loop and model.fit ran", f"loop done on rank {RANK}" in out and f"fit done on rank {RANK}" in out,
          out[-2000:])
    saved_by_rank_0(files, ["best.keras", "checkpoint-1.h5", "checkpoint-2.h5"])


def case_idioms_with_the_port_alone(rank, size):
    idioms([])


def case_idioms_with_the_port_alone_and_adasum(rank, size):
    idioms(["--use-adasum"])


def case_tensorflow2_mnist_custom_loop(rank, size):
    out, files = run(os.path.join(EXAMPLES, "tensorflow2_mnist.py"), steps=21, epochs=1)
    if RANK == 0:  # steps 0, 10 and 20, printed by rank 0 alone
        losses = [float(x) for x in re.findall(r"Loss: ([0-9.]+)", out)]
        check("the loss fell", len(losses) == 3 and losses[-1] < losses[0], losses)
    check(f"rank {RANK}'s checkpoints", any(f.startswith("checkpoints") for f in files) == (RANK == 0), files)


def case_tensorflow2_keras_mnist_fit(rank, size):
    out, files = run(os.path.join(EXAMPLES, "tensorflow2_keras_mnist.py"), steps=3, epochs=2)
    check("the progress bar (rank 0's alone)", out.count("Epoch 1/2") == (RANK == 0), out[-2000:])
    saved_by_rank_0(files, ["checkpoint-1.h5", "checkpoint-2.h5"])


def benchmark(name, extra=()):
    out, _ = run(os.path.join(EXAMPLES, name), BENCHMARK_ARGS + list(extra))
    total = re.search(rf"Total img/sec on {SIZE} CPU\(s\): [0-9.]+", out)
    check("the total throughput, printed by rank 0", bool(total) == (RANK == 0), out[-2000:])


def case_tensorflow2_synthetic_benchmark(rank, size):
    benchmark("tensorflow2_synthetic_benchmark.py", ["--num-warmup-batches", "1"])


def case_tensorflow2_keras_synthetic_benchmark(rank, size):
    benchmark("tensorflow2_keras_synthetic_benchmark.py")


if __name__ == "__main__":
    run_cases(globals(), RANK, SIZE)
