"""Fake ``cupy.cuda``: several devices with a current one per thread (see ``.._devices``);
streams whose work runs deferred, in stream order, and events that order it (see ``.._streams``)."""
from .. import _devices, _streams
from . import runtime  # noqa: F401


class Event:
    """A mark in a stream's work: synchronising it, or a stream waiting on it, runs (orders) the
    work issued on the recorded stream before the record."""

    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self._mark = None

    def record(self, stream=None):
        queue = (stream or get_current_stream())._queue
        self._mark = queue.mark()

    def synchronize(self):
        if self._mark is not None:
            self._mark[0].flush(self._mark[1])

    @property
    def done(self):
        return self._mark is None or self._mark[0].done >= self._mark[1]


class Stream:
    """A stream of the device current at its creation; ``Stream(null=True)`` is that device's
    legacy default stream. ``with stream:`` / ``use()`` make it the thread's current stream."""

    def __init__(self, null=False, non_blocking=False, ptds=False):
        self._queue = _streams.null_stream(_devices.current()) if null else _streams.new_stream(non_blocking)
        self._before = []

    @classmethod
    def _of(cls, queue):
        stream = cls.__new__(cls)
        stream._queue, stream._before = queue, []
        return stream

    @property
    def ptr(self):
        return self._queue.ptr

    @property
    def device_id(self):
        return self._queue.device

    def wait_event(self, event):
        if event._mark is not None:  # CUDA: waiting on an event never recorded is a no-op
            self._queue.issue(lambda: None, deps=[event._mark])

    def record(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def synchronize(self):
        self._queue.flush()

    @property
    def done(self):
        return self._queue.done >= self._queue.issued

    def use(self):
        _streams.set_current(self._queue)
        return self

    def __enter__(self):
        self._before.append(_streams.set_current(self._queue))
        return self

    def __exit__(self, *exc):
        _streams.set_current(self._before.pop())
        return False

    def __eq__(self, other):
        return isinstance(other, Stream) and other._queue is self._queue

    def __hash__(self):
        return hash(id(self._queue))


def get_current_stream(device_id=None):
    return Stream._of(_streams.current())


def get_elapsed_time(start, end):
    return 0.001  # ms; the fake has no clock worth reporting


class Device:
    """A CUDA device; ``Device()`` is the calling thread's current one. As a context manager it
    makes itself current and restores the previous device on exit (per thread, like CuPy's)."""

    def __init__(self, device=None):
        self.id = _devices.current() if device is None else _devices.check(int(device))
        self.attributes = {"MultiProcessorCount": 4}
        self._before = []

    def synchronize(self):
        _streams.synchronize_device(self.id)

    def use(self):
        _devices.set_current(self.id)

    def __enter__(self):
        self._before.append(_devices.current())
        _devices.set_current(self.id)
        return self

    def __exit__(self, *exc):
        _devices.set_current(self._before.pop())
        return False

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return f"<CUDA Device {self.id}>"


def alloc_pinned_memory(nbytes):
    return bytearray(nbytes)
