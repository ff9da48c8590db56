"""Fake ``cupy.cuda``: several devices with a current one per thread (see ``.._devices``);
streams and events that order nothing (work is synchronous)."""
from .. import _devices
from . import runtime  # noqa: F401


class Event:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass


class Stream:
    def __init__(self, null=False, non_blocking=False):
        self.ptr = 0 if null else id(self)

    def wait_event(self, event):
        pass

    def record(self, event=None):
        return event or Event()

    def synchronize(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NULL = Stream(null=True)


def get_current_stream():
    return _NULL


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
        pass

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
