"""The fake's streams: work issued on a stream runs later, in stream order, when something a real
GPU would wait for asks for it, so a missing synchronisation shows as stale data, not luck.

Each stream keeps a queue of issued work. An item runs when its stream is flushed up to it:
``Stream.synchronize``, ``Event.synchronize`` of an event recorded after it, another stream that
waits on such an event reaching its wait, ``Device.synchronize`` / ``cudaFree``, a host read that
CuPy makes on that stream (``.get()``, ``cupy.asnumpy``, a scalar), or an IPC event recorded after
it (another process waits on that event and cannot flush this one's queue, so the record runs
the work before it). A DLPack export flushes nothing: its consumer (TensorFlow) reads on streams
that nothing orders after ours.

Null stream semantics are CUDA's legacy default stream, one per device and shared by every thread
of the process: work on it waits for all earlier work on the device's *blocking* streams, and work
later issued on a blocking stream waits for earlier null-stream work; ``non_blocking`` streams
are ordered against nothing implicitly.

Positions: a stream counts the items issued on it and the items run; an event is a
``(stream, issued count)`` mark, and "flush up to n" runs items until ``done >= n``. Every wait
refers to work issued earlier in host order, so flushing cannot cycle. One process-wide lock
serialises issuing and running (the runtime issues from its background thread while the user's
thread reads).
"""
import collections
import itertools
import threading
import weakref

from . import _devices

_lock = threading.RLock()
_local = threading.local()
_ptrs = itertools.count(0x1000, 0x10)
_by_ptr = weakref.WeakValueDictionary()  # stream pointer -> _Queue, for the runtime's stream handles
_per_device = collections.defaultdict(weakref.WeakSet)  # device -> its live queues (null included)
_pending = set()  # queues with work not run yet (kept alive: CUDA finishes a destroyed stream's work)
_nulls = {}  # device -> its legacy default stream


class _Queue:
    """One stream's issued and not yet run work."""

    def __init__(self, device: int, null: bool, blocking: bool):
        self.device = device
        self.null = null
        self.blocking = blocking and not null
        self.ptr = 0 if null else next(_ptrs)
        self.items = collections.deque()  # (deps, fn): run deps' flushes, then fn
        self.issued = 0
        self.done = 0
        _per_device[device].add(self)
        if not null:
            _by_ptr[self.ptr] = self

    def mark(self):
        return (self, self.issued)

    def issue(self, fn, deps=()):
        with _lock:
            deps = list(deps)
            if self.null:  # the legacy stream waits for the device's blocking streams
                deps += [q.mark() for q in list(_per_device[self.device]) if q.blocking and q.done < q.issued]
            elif self.blocking:  # and blocking streams wait for it
                null = null_stream(self.device)
                if null.done < null.issued:
                    deps.append(null.mark())
            self.items.append((deps, fn))
            self.issued += 1
            _pending.add(self)

    def flush(self, upto=None):
        with _lock:
            upto = self.issued if upto is None else upto
            while self.done < upto:
                deps, fn = self.items[0]
                for queue, position in deps:
                    queue.flush(position)
                self.items.popleft()
                self.done += 1  # before fn: an item that raises must not run twice
                fn()
            if self.done == self.issued:
                _pending.discard(self)


def null_stream(device: int) -> _Queue:
    with _lock:
        queue = _nulls.get(device)
        if queue is None:
            queue = _nulls[device] = _Queue(device, null=True, blocking=True)
        return queue


def new_stream(non_blocking: bool) -> _Queue:
    return _Queue(_devices.current(), null=False, blocking=not non_blocking)


def current() -> _Queue:
    """The calling thread's current stream on its current device (the null stream unless a
    ``with stream:`` block or ``stream.use()`` chose another)."""
    return current_on(_devices.current())


def current_on(device: int) -> _Queue:
    """The calling thread's current stream on ``device``."""
    chosen = getattr(_local, "streams", {}).get(device)
    return chosen if chosen is not None else null_stream(device)


def set_current(queue) -> _Queue:
    """Make ``queue`` current on its device for this thread; returns what was current there."""
    streams = _local.__dict__.setdefault("streams", {})
    before = streams.get(queue.device)
    streams[queue.device] = queue
    return before if before is not None else null_stream(queue.device)


def by_ptr(ptr: int) -> _Queue:
    """The stream a runtime call names (0: the current device's null stream)."""
    if int(ptr) == 0:
        return null_stream(_devices.current())
    queue = _by_ptr.get(int(ptr))
    if queue is None:
        raise _devices.CUDARuntimeError(f"cudaErrorInvalidResourceHandle: no stream {int(ptr):#x}")
    return queue


def launch(fn, stream=None) -> None:
    """Issue ``fn`` on ``stream`` (default: the current one), which must be on the current device."""
    queue = current() if stream is None else stream
    if queue.device != _devices.current():
        raise _devices.CUDARuntimeError(f"cudaErrorInvalidResourceHandle: a launch on device {_devices.current()} "
                                        f"into a stream of device {queue.device}")
    queue.issue(fn)


def synchronize_device(device: int) -> None:
    """Run every stream's work on ``device``; other readers of its memory (TensorFlow's streams)
    are done too."""
    from . import _pool

    with _lock:
        for queue in list(_per_device[device]):
            queue.flush()
    _pool.device_synchronized(device)
