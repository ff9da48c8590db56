"""The fake's memory pool, as CuPy's default pool behaves towards TensorFlow.

CuPy returns an array's block to its pool when the array dies, at host time, and hands it out
again to the next allocation of that size on the same stream: safe for CuPy's own work, which
that stream orders, but not for a reader on another stream. TensorFlow is such a reader: a block
it took by DLPack (:func:`tf_took`) may still be read by a kernel TF queued on its own stream
after TF let go of the tensor, until the device is synchronised. Reusing such a block raises
here; on a GPU the new owner's writes would race TF's reads.

Each block remembers the stream it was allocated on (the stream that last used it, for the pool);
reuse is issued on that stream: the block is poisoned in stream order, so a read of the new array
before its work ran still sees garbage.
"""
import weakref

import numpy as np

from . import _devices, _streams

POISON = 0xFF
POOL_BYTES = 64 << 20
"""Bytes of free blocks the pool keeps; past that a freed block is released."""

_free = {}  # (device, stream ptr, nbytes) -> [_Block]
_pooled = [0]
_blocks = weakref.WeakSet()  # every block alive, free or leased


class _Block:
    """A piece of fake device memory of ``nbytes`` on ``device``."""

    def __init__(self, nbytes, device, stream):
        self.raw = np.full(nbytes, POISON, dtype=np.uint8)
        self.start = self.raw.__array_interface__["data"][0]
        self.nbytes, self.device, self.stream = nbytes, device, stream
        self.tf_may_read = False
        _devices.memory.add(self.start, nbytes, device)
        weakref.finalize(self, _devices.memory.remove, self.start)
        _blocks.add(self)


class _Lease:
    """The base object of the arrays over a block: when the last of them dies, the block goes
    back to the pool (CuPy's ``MemoryPointer`` freeing its ``PooledMemory``)."""

    def __init__(self, block):
        self.block = block
        self.__array_interface__ = block.raw.__array_interface__

    def __del__(self):
        block = self.block
        try:
            if _pooled[0] + block.nbytes > POOL_BYTES:
                return  # released: the pool is full
            _free.setdefault((block.device, block.stream.ptr, block.nbytes), []).append(block)
            _pooled[0] += block.nbytes
        except Exception:  # noqa: BLE001 - at interpreter exit the module may be gone
            pass


def take(nbytes):
    """An array of ``nbytes`` bytes on the current device, from the pool where a free block of that
    size was last used on the current stream, else new."""
    device, stream = _devices.current(), _streams.current()
    blocks = _free.get((device, stream.ptr, nbytes))
    block = None
    while blocks:
        try:
            block = blocks.pop()
        except IndexError:
            break
        _pooled[0] -= block.nbytes
        break
    if block is None:
        block = _Block(nbytes, device, stream)
    elif block.tf_may_read:
        raise RuntimeError(f"fake CuPy memory pool: reusing the block at {block.start:#x}, which TensorFlow took by "
                           "DLPack and may still read on its own stream (no device synchronize since TensorFlow let "
                           "go of it); on a GPU the new array's writes race TensorFlow's reads")
    else:
        raw = block.raw
        stream.issue(lambda: raw.__setitem__(Ellipsis, POISON))
    return np.asarray(_Lease(block))


def _containing(pointer):
    for block in list(_blocks):
        if block.start <= pointer < block.start + block.nbytes:
            return block
    return None


def tf_took(pointer):
    """TensorFlow took the memory at ``pointer`` by DLPack: its stream may read it from now on."""
    block = _containing(int(pointer))
    if block is not None:
        block.tf_may_read = True


def device_synchronized(device):
    """Every stream of ``device`` finished its work, TensorFlow's included."""
    for block in list(_blocks):
        if block.device == device:
            block.tf_may_read = False
