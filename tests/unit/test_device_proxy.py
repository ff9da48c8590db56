"""The device executor's proxy (blinkflow/backends/cuda/proxy.py) posts nothing for a call until
its launch was issued: a receive posted for a call whose launch then failed could take a peer's
chunk of the next call (MPI matches by source and tag alone), and that call would wait for good.
A communicator that records what it is asked stands in for MPI: the proxy calls nothing else."""
import threading
import time

import numpy as np
import pytest

pytest.importorskip("mpi4py")

from blinkflow.backends.cuda.proxy import Edge, Proxy  # noqa: E402
from blinkflow.errors import BackendError  # noqa: E402


class _Request:
    def __init__(self, done):
        self.done = done

    def Test(self):
        return self.done

    def Cancel(self):
        pass


class RecordingComm:
    """Records every send and receive posted; receives complete at once (a peer ahead of us)."""

    def __init__(self):
        self.posted = []
        self.lock = threading.Lock()

    def Irecv(self, buf, source, tag):
        with self.lock:
            self.posted.append(("recv", source, tag))
        return _Request(True)

    def Isend(self, buf, dest, tag):
        with self.lock:
            self.posted.append(("send", dest, tag))
        return _Request(True)


def _receiving_edge(words: np.ndarray, ring: np.ndarray) -> Edge:
    """A connection receiving 2 chunks of 64 bytes from rank 1 on channel 3 into a ring of 2
    slots (both free, so the proxy may post at once); ``tail`` is the word the proxy raises as
    chunks land."""
    tail, head = words[0:1], words[1:2]
    return Edge(peer=1, channel=3, sending=False, ring=ring.__array_interface__["data"][0],
                tail=tail.__array_interface__["data"][0], head=head.__array_interface__["data"][0],
                base=0, counts=[64, 64], window=2, slot_bytes=64)


@pytest.fixture
def served():
    """A proxy on a :class:`RecordingComm`, one receiving connection, the call's ring words
    (``[tail, head]``) and its abort flag; the proxy is closed afterwards."""
    comm = RecordingComm()
    proxy = Proxy(comm)
    words, ring = np.zeros(2, np.int64), np.zeros(128, np.uint8)
    abort = np.zeros(1, np.int32)
    call = proxy.start([_receiving_edge(words, ring)], abort, timeout=30.0)
    yield proxy, call, comm, words, abort
    proxy.close()


def test_a_call_whose_launch_failed_posts_nothing_and_moves_no_counter(served):
    proxy, call, comm, words, abort = served
    time.sleep(0.3)        # the proxy thread has long picked the call up
    abort[0] = 1           # the launch failed: the executor raises the flag, then finishes
    with pytest.raises(BackendError, match="aborted"):
        proxy.finish(call)
    assert comm.posted == [], "the proxy posted transfers for a call whose launch failed"
    assert words[0] == 0, "the proxy raised a ring's tail for a call whose launch failed"


def test_a_call_whose_launch_was_issued_is_served(served):
    proxy, call, comm, words, abort = served
    call.issued.set()
    proxy.finish(call)     # the launch ended
    assert comm.posted == [("recv", 1, 3), ("recv", 1, 3)]
    assert words[0] == 2
