"""Horovod's import names served by blinkflow's modules, on every rank of a compatibility run.

``horovod.<path>`` is ``blinkflow.<path>`` (the same module object, so a test that imports
``horovod.tensorflow as hvd`` holds ``blinkflow.tensorflow``). Nothing else of a test changes.

Horovod's test files also import three of Horovod's private helpers at module level
(``horovod.tensorflow.util._executing_eagerly``, ``horovod.common.util.is_version_greater_equal_than``,
``horovod.runner.util.threads.in_thread``); without them no test of the file could run. They are
served here by what each one means (TensorFlow's eager flag, a version comparison, a call on a
thread), written for this runner. Any other private Horovod module is a :class:`HorovodInternal`
stand-in: importing it works, using anything from it raises, and the runner counts the test as
depending on Horovod's internals.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import threading
import types


class HorovodInternal(AttributeError):
    """A test used a private part of Horovod that blinkflow does not offer."""


def _executing_eagerly():
    import tensorflow as tf

    return tf.executing_eagerly()


def _is_version_greater_equal_than(ver, target):
    from packaging import version

    return version.parse(ver) >= version.parse(target)


def _in_thread(target, args=(), name=None, daemon=True, silent=False):
    thread = threading.Thread(target=target, args=args, name=name, daemon=daemon)
    thread.start()
    return thread


#: The private helpers served by meaning, per Horovod module.
HELPERS = {
    "horovod.tensorflow.util": {"_executing_eagerly": _executing_eagerly},
    "horovod.common.util": {"is_version_greater_equal_than": _is_version_greater_equal_than},
    "horovod.runner.util.threads": {"in_thread": _in_thread},
}


class _Internal(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise HorovodInternal(f"Horovod internal: {self.__name__}.{name} has no blinkflow counterpart")


class HorovodAsBlinkflow(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The meta-path finder: ``horovod[.x]`` -> ``blinkflow[.x]``, else a private stand-in."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "horovod" or fullname.startswith("horovod."):
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = module.__name__
        if name in HELPERS:
            module.__class__ = _Internal
            module.__dict__.update(HELPERS[name])
            return
        try:
            real = importlib.import_module("blinkflow" + name[len("horovod"):])
        except ModuleNotFoundError:
            module.__class__ = _Internal
            return
        # The import system returns what sys.modules holds once this returns.
        sys.modules[name] = real


def install() -> None:
    if not any(isinstance(f, HorovodAsBlinkflow) for f in sys.meta_path):
        sys.meta_path.insert(0, HorovodAsBlinkflow())
