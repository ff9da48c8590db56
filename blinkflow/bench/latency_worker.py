"""One job of ``python -m blinkflow.bench latency``, run under mpirun as a plain script.

``--side blinkflow``: ``--calls`` synchronous 1-float all-reduces (``blinkflow.allreduce`` of a
numpy array, the same name every call: the response cache's steady state), each call's route
stamped at the hops of docs/runtime.md by wrapping the functions that carry it (a stamp is one
``perf_counter_ns`` and a list append, ~1 us, so the stamped total is a little above the plain
one, which is timed in a block of its own first). ``--side mpi``: ``MPI_Allreduce`` of one
float, in a job where blinkflow never started. ``--side tf``: TensorFlow's own floor beside
blinkflow's call: a ``tf.function`` that adds one, one that crosses to Python by
``tf.numpy_function`` and back, and one that all-reduces through ``blinkflow.tensorflow``, in
blocks of calls taken in turn.

Rank 0 prints one JSON object: medians in microseconds, and per hop the median of the calls
that took the most common route.
"""
import argparse
import collections
import functools
import json
import statistics
import time

import numpy as np

#: (module, attribute, label): the functions whose entry (">") and exit ("<") are stamped.
STAMPED = [
    ("blinkflow.runtime.state", "SharedState.queue", "queue"),
    ("blinkflow.runtime.state", "SharedState.drain", "drain"),
    ("blinkflow.backends.quiet_wait", "wait", "mpi_wait"),
    ("blinkflow.runtime.executor", "Executor.run", "execute"),
    ("blinkflow.backends.cpu.backend", "CpuBackend.allreduce_algorithm", "backend"),
    ("blinkflow.runtime.state", "SharedState.complete", "complete"),
]
#: What happens between two stamps, for the report.
HOPS = {
    ("call>", "queue>"): "user thread: name drawn, arguments checked, request made",
    ("queue>", "queue<"): "user thread: entry made and queued, background thread rung",
    ("queue<", "drain>"): "background thread wakes",
    ("drain<", "mpi_wait>"): "negotiation: cache lookup, bit vector packed",
    ("mpi_wait>", "mpi_wait<"): "MPI wait (negotiation's Iallreduce, or the data's)",
    ("mpi_wait<", "execute>"): "negotiation: agreed bits read, responses made",
    ("execute>", "backend>"): "executor: batch planned, result memory, op and factors",
    ("backend>", "backend<"): "backend: the call shape's algorithm looked up",
    ("backend<", "mpi_wait>"): "algorithm: MPI's all-reduce started",
    ("mpi_wait<", "complete>"): "algorithm: scaled; executor: results sliced",
    ("complete>", "complete<"): "result handed to the slot (the user thread is woken)",
    ("complete<", "execute<"): "executor: done",
    ("execute<", "call<"): "user thread wakes, result returned",
}


def _median_us(values):
    return round(statistics.median(values) * 1e6, 1)


def _stamp(log):
    import importlib

    now = time.perf_counter_ns
    for module_name, attribute, label in STAMPED:
        owner = importlib.import_module(module_name)
        path = attribute.split(".")
        for part in path[:-1]:
            owner = getattr(owner, part)
        original = getattr(owner, path[-1])

        def stamped(*args, __original=original, __label=label, **kwargs):
            log.append((__label + ">", now()))
            try:
                return __original(*args, **kwargs)
            finally:
                log.append((__label + "<", now()))

        setattr(owner, path[-1], functools.wraps(original)(stamped))


def _routes(log):
    """Per call, its stamps (those between the call's start and end, from either thread)."""
    calls, current = [], None
    for label, t in log:
        if label == "call>":
            current = [(label, t)]
        elif current is not None:
            current.append((label, t))
            if label == "call<":
                calls.append(current)
                current = None
    return calls


def _breakdown(calls):
    shapes = collections.Counter(tuple(label for label, _ in c) for c in calls)
    route, count = shapes.most_common(1)[0]
    same = [c for c in calls if tuple(label for label, _ in c) == route]
    hops = []
    for j in range(1, len(route)):
        us = statistics.median((c[j][1] - c[j - 1][1]) / 1e3 for c in same)
        hops.append({"from": route[j - 1], "to": route[j], "us": round(us, 1),
                     "what": HOPS.get((route[j - 1], route[j]), "")})
    return {"calls": len(calls), "on_route": count, "hops": hops,
            "total_us": round(statistics.median((c[-1][1] - c[0][1]) / 1e3 for c in same), 1)}


def _blinkflow(calls: int) -> dict:
    import blinkflow as bf

    bf.init()
    a = np.ones(1, np.float32)
    for _ in range(200):  # warm: the first call negotiates in full and lowers nothing
        bf.allreduce(a, op=bf.Sum, name="latency.one")
    plain = []
    for _ in range(calls):
        t0 = time.perf_counter()
        bf.allreduce(a, op=bf.Sum, name="latency.one")
        plain.append(time.perf_counter() - t0)
    log = []
    _stamp(log)
    now = time.perf_counter_ns
    for _ in range(calls):
        log.append(("call>", now()))
        bf.allreduce(a, op=bf.Sum, name="latency.one")
        log.append(("call<", now()))
    out = {"side": "blinkflow", "median_us": _median_us(plain),
           "p90_us": round(statistics.quantiles(plain, n=10)[-1] * 1e6, 1), "stamped": _breakdown(_routes(log))}
    bf.shutdown()
    return out


def _mpi(calls: int) -> dict:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    a, b = np.ones(1, np.float32), np.empty(1, np.float32)
    for _ in range(200):
        comm.Allreduce(a, b)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        comm.Allreduce(a, b)
        times.append(time.perf_counter() - t0)
    return {"side": "mpi", "median_us": _median_us(times)}


def _tf(calls: int) -> dict:
    import tensorflow as tf

    import blinkflow.tensorflow as hvd

    hvd.init()
    x = tf.constant([1.0])
    steps = {
        "tf_function_add": tf.function(lambda t: t + 1),
        "tf_function_numpy_function": tf.function(
            lambda t: tf.numpy_function(lambda a: a, [t], tf.float32, stateful=True)),
        "tf_function_allreduce": tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, name="latency.tf")),
    }
    times = {name: [] for name in steps}
    for step in steps.values():
        for _ in range(100):
            step(x)
    # Blocks of one function at a time, the blocks of the three in turn: the same machine load for
    # each, and the all-reduce's calls not waiting for a peer's local calls (whose timing differs).
    blocks = 10
    for _ in range(blocks):
        for name, step in steps.items():
            for _ in range(max(1, calls // blocks)):
                t0 = time.perf_counter()
                step(x).numpy()
                times[name].append(time.perf_counter() - t0)
    hvd.shutdown()
    return dict({"side": "tf"}, **{name: _median_us(t) for name, t in times.items()})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--side", choices=["blinkflow", "mpi", "tf"], required=True)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    out = {"blinkflow": _blinkflow, "mpi": _mpi, "tf": _tf}[args.side](args.calls)
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_rank() == 0:
        print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
