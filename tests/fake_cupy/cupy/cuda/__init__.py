"""Fake ``cupy.cuda``: one device, streams and events that order nothing (work is synchronous)."""
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
    def __init__(self, device=None):
        self.id = device or 0
        self.attributes = {"MultiProcessorCount": 4}

    def synchronize(self):
        pass

    def use(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def alloc_pinned_memory(nbytes):
    return bytearray(nbytes)
