"""The whole port of a Horovod TF2 script to blinkflow, as a function on its text.

:func:`port` changes the import lines (``horovod`` becomes ``blinkflow``; ``import horovod``
becomes ``import blinkflow as horovod``) and drops one Keras 2 spelling that Keras 3 itself
removed: ``experimental_run_tf_function=...`` in ``model.compile`` (the README lists it). Nothing
else: every changed line is reported, so a test can hold the port to exactly that.

:func:`run_script` runs a script (ported so, or one of examples/horovod's ports) as
``__main__``, and under :func:`capped` with two things a test needs that leave the script's text
alone: MNIST generated where Keras would download it (``keras.datasets.mnist.load_data``), and
optionally fewer steps and epochs (``tf.data``'s ``take`` and ``fit``'s
``epochs``/``steps_per_epoch`` capped), as the CPU suite cannot afford Horovod's 24 epochs.

``python horovod_port.py STEPS EPOCHS script.py [args...]`` (STEPS 0: no cap) runs it under mpirun.
"""
import contextlib
import json
import os
import re
import sys
from typing import List, Tuple

_IMPORT = re.compile(r"^(\s*)import horovod((?:\.[\w.]+)?)(\s+as\s+\w+)?(\s*(?:#.*)?)$")
_FROM = re.compile(r"^(\s*)from horovod((?:\.[\w.]+)?) import ")
_RUN_TF_FUNCTION = re.compile(r",\s*experimental_run_tf_function\s*=\s*\w+")
#: The benchmarks' own flags for a CI-sized run: MobileNet (v1), whose training step TensorFlow
#: traces in about half the CPU time of MobileNetV2's (10 against 24 CPU-seconds for one rank).
BENCHMARK_ARGS = ["--model", "MobileNet", "--batch-size", "2", "--num-batches-per-iter", "2", "--num-iters", "2",
                  "--no-cuda"]


def port(text: str) -> Tuple[str, List[Tuple[int, str, str]]]:
    """(ported text, [(line number, before, after)] of each changed line)."""
    lines = text.split("\n")
    changes = []
    for i, line in enumerate(lines):
        new = _port_line(line)
        if new != line:
            changes.append((i + 1, line, new))
            lines[i] = new
    ported = "\n".join(lines)
    # A compile call's keyword may sit on a line of its own: drop it from the joined text, then
    # record the lines that changed.
    dropped = _RUN_TF_FUNCTION.sub("", ported)
    if dropped != ported:
        before, after = ported.split("\n"), dropped.split("\n")
        changes += _line_changes(before, after)
        ported = dropped
    return ported, sorted(changes)


def _port_line(line: str) -> str:
    m = _IMPORT.match(line)
    if m:
        indent, sub, alias, tail = m.groups()
        return f"{indent}import blinkflow{sub}{alias or ' as horovod' * (not sub)}{tail}"
    m = _FROM.match(line)
    if m:
        return _FROM.sub(lambda g: f"{g.group(1)}from blinkflow{g.group(2)} import ", line, count=1)
    return line


def _line_changes(before: List[str], after: List[str]) -> List[Tuple[int, str, str]]:
    """Changed lines between two texts that differ only by deletions within or of whole lines."""
    import difflib

    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes():
        if tag != "equal":
            out.append((i1 + 1, "\n".join(before[i1:i2]), "\n".join(after[j1:j2])))
    return out


#: How examples/horovod marks what it changed in a Horovod example (see :func:`example_port`).
WAS = "  # blinkflow port, was: "
ADDED = "  # blinkflow port: added"
_MNIST_DOWNLOAD = "tf.keras.datasets.mnist.load_data("


def example_port(text: str) -> str:
    """A Horovod example as examples/horovod holds it: :func:`port`'s changes, and MNIST made by
    ``mnist_data.py`` where the example would download it, each changed line ending in a comment
    that holds the original line(s) exactly (JSON), each added line marked; so that
    :func:`example_original` gives Horovod's file back, byte for byte."""
    out: List[str] = []
    last_import = None
    for line in text.split("\n"):
        if re.match(r"\s*experimental_run_tf_function\s*=\s*\w+", line) and out and out[-1].rstrip().endswith(","):
            # The compile keyword on a line of its own: it and the comma before it go.
            before = _originals(out.pop())
            rest = re.sub(r"^\s*experimental_run_tf_function\s*=\s*\w+", "", line)
            new = before[-1].rstrip()[:-1] + rest
            out.append(new + WAS + json.dumps(before + [line]))
            continue
        new = _port_line(_RUN_TF_FUNCTION.sub("", line)).replace(_MNIST_DOWNLOAD, "mnist_data.load_data(")
        if _IMPORT.match(line) or _FROM.match(line):
            last_import = len(out)
        out.append(line if new == line else new + WAS + json.dumps([line]))
    if any(_MNIST_DOWNLOAD in line for line in text.split("\n")):
        at = last_import + 1 if last_import is not None else 0
        out.insert(at, "import mnist_data" + ADDED)
    return "\n".join(out)


def _originals(line: str) -> List[str]:
    """The original line(s) a marked line stands for (the line itself when unmarked)."""
    if WAS in line:
        return json.loads(line.split(WAS, 1)[1])
    return [line]


def example_original(text: str) -> str:
    """Horovod's file that :func:`example_port` made ``text`` from."""
    out: List[str] = []
    for line in text.split("\n"):
        if line.endswith(ADDED):
            continue
        out.extend(_originals(line))
    return "\n".join(out)


def generated_mnist(path=None):
    """``keras.datasets.mnist.load_data``'s shapes and types, made from examples/data/digits.csv.gz."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "examples", "horovod"))
    import mnist_data

    return mnist_data.load_data(path)


@contextlib.contextmanager
def capped(steps: int = 0, epochs: int = 0):
    """While it lasts: MNIST generated where Keras would download it, and with ``steps``,
    ``tf.data.Dataset.take`` capped at ``steps`` batches and ``keras.Model.fit`` at ``epochs``
    epochs (1 if 0) of at most ``steps`` steps. Everything is put back at the end (several
    scripts share a process in the tests' TF jobs)."""
    import keras
    import tensorflow as tf

    take, fit, load_data = tf.data.Dataset.take, keras.Model.fit, keras.datasets.mnist.load_data

    def capped_take(self, count, name=None):
        return take(self, min(int(count), steps), name=name)

    def capped_fit(self, *args, **kwargs):
        kwargs["epochs"] = min(kwargs.get("epochs", 1), epochs or 1)
        if kwargs.get("steps_per_epoch"):
            kwargs["steps_per_epoch"] = min(kwargs["steps_per_epoch"], steps)
        return fit(self, *args, **kwargs)

    keras.datasets.mnist.load_data = generated_mnist
    if steps:
        tf.data.Dataset.take, keras.Model.fit = capped_take, capped_fit
    try:
        yield
    finally:
        tf.data.Dataset.take, keras.Model.fit, keras.datasets.mnist.load_data = take, fit, load_data


def run_script(script: str, argv: List[str], ported: bool) -> None:
    """Run ``script`` as ``__main__`` with ``argv``: its text through :func:`port` first where
    ``ported`` (a Horovod script), as it is otherwise (examples/horovod's ports)."""
    with open(script) as f:
        text = f.read()
    saved = sys.argv
    sys.argv = [script] + list(argv)
    directory = os.path.dirname(os.path.abspath(script))
    if directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        exec(compile(port(text)[0] if ported else text, script, "exec"), {"__name__": "__main__", "__file__": script})
    finally:
        sys.argv = saved


def run_ported(script: str, argv: List[str], steps: int = 0, epochs: int = 0) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    with capped(steps, epochs):
        run_script(script, argv, ported=True)


if __name__ == "__main__":
    run_ported(sys.argv[3], sys.argv[4:], steps=int(sys.argv[1]), epochs=int(sys.argv[2]))
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from harness import done

    done(int(os.environ["OMPI_COMM_WORLD_RANK"]))  # the script may have finalised MPI
