"""Gradient compression applied around a collective (Horovod's ``Compression``).

A compressor turns a tensor into the form that travels and back. ``fp16`` halves the bytes of
float32/float64 tensors; integers and float16 travel unchanged. Works on numpy arrays here; the
TensorFlow bindings pass tf tensors through :func:`_cast`, which casts what is not an array
(:mod:`.arrays`) with ``tf.cast``, imported lazily.
"""
from __future__ import annotations

import abc

from .arrays import is_array


def _is_float(dtype) -> bool:
    name = getattr(dtype, "name", str(dtype))
    return name in ("float32", "float64")


def _cast(tensor, dtype_name: str):
    if is_array(tensor):
        return tensor.astype(dtype_name)
    import tensorflow as tf  # lazy: only a tf tensor brings us here

    return tf.cast(tensor, dtype_name)


class Compressor(abc.ABC):
    """Interface: ``compress(t) -> (t', ctx)`` and ``decompress(t', ctx) -> t``."""

    @staticmethod
    @abc.abstractmethod
    def compress(tensor):
        """Return the tensor that travels and the context needed to restore it."""

    @staticmethod
    @abc.abstractmethod
    def decompress(tensor, ctx):
        """Undo :meth:`compress`."""


class NoneCompressor(Compressor):
    """Send tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Send float32/float64 tensors as float16 and restore their dtype afterwards."""

    @staticmethod
    def compress(tensor):
        dtype = tensor.dtype
        if _is_float(dtype):
            return _cast(tensor, "float16"), dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is None:
            return tensor
        return _cast(tensor, getattr(ctx, "name", str(ctx)))


class Compression:
    """Horovod's namespace: ``Compression.none`` and ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
