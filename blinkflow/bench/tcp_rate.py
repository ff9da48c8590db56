"""A link's rate, measured: one TCP stream between two hosts of a :mod:`.cluster`.

``python tcp_rate.py serve ADDRESS PORT``: accept one connection on ADDRESS:PORT, count what
arrives until the sender closes, print ``RATE <bits per second>`` (from the first byte to the
last: the queue a rate limit keeps drains before the close arrives, so the figure is what the
link delivered, not what the sender's buffers took). ``python tcp_rate.py send ADDRESS PORT
SECONDS``: connect (retrying while the server starts) and send for SECONDS. Run by path, so it
needs nothing but Python on either host.
"""
import socket
import sys
import time

BLOCK = 1 << 20


def serve(address: str, port: int) -> float:
    with socket.create_server((address, port)) as server:
        connection, _ = server.accept()
        with connection:
            received, first, view = 0, None, bytearray(BLOCK)
            while True:
                n = connection.recv_into(view)
                if not n:
                    break
                if first is None:
                    first = time.perf_counter()
                received += n
            last = time.perf_counter()
    return received * 8 / max(last - first, 1e-9) if first is not None else 0.0


def send(address: str, port: int, seconds: float) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            connection = socket.create_connection((address, port), timeout=10)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with connection:
        block = b"\0" * BLOCK
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            connection.sendall(block)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        print(f"RATE {serve(sys.argv[2], int(sys.argv[3])):.0f}", flush=True)
    else:
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
