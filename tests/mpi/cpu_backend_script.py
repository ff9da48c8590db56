"""Every CpuBackend collective at this rank count, in one mpirun launch (run by test_cpu_backend.py).

Each rank rebuilds every peer's input from a seed, so it checks its own result against a float64
(or exact integer) reference, and the ranks compare hashes of their results to prove they are
bitwise identical. Each case reports through the test harness (tests/harness.py); the chunk size
comes from BLINKFLOW_CHUNK_BYTES.
"""
import contextlib
import dataclasses
import faulthandler
import hashlib
import sys
import time

import numpy as np
from mpi4py import MPI

from blinkflow.backends import teardown
from blinkflow.backends.cpu import CpuBackend
from blinkflow.runtime.standalone import standalone_context
from blinkflow.config import Config
from blinkflow.ops import ReduceOp
from harness import run_cases, skip

comm = MPI.COMM_WORLD
RANK, SIZE = comm.Get_rank(), comm.Get_size()
DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.bool_]
OPS = [ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.PRODUCT]
NUMPY_OP = {ReduceOp.SUM: np.add, ReduceOp.MIN: np.minimum, ReduceOp.MAX: np.maximum, ReduceOp.PRODUCT: np.multiply}
BACKEND = None   # the backend every case shares, made in main()
CONFIG = None


def data(rank, n, dtype, seed):
    rng = np.random.default_rng([seed, rank, n])
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.uniform(-1, 1, n).astype(dtype)
    if dtype.kind == "b":
        return rng.random(n) < 0.7
    return rng.integers(0, 5, n).astype(dtype)


def check_same_everywhere(arr, what):
    digest = hashlib.sha1(np.ascontiguousarray(arr).view(np.uint8)).hexdigest()
    digests = comm.allgather(digest)
    if len(set(digests)) != 1:
        raise AssertionError(f"{what}: results differ across ranks: {digests}")


def expect_reduced(res, inputs, op, what):
    dtype = inputs[0].dtype
    if dtype.kind == "f" and op in (ReduceOp.SUM, ReduceOp.PRODUCT):
        ref = inputs[0].astype(np.float64)
        for x in inputs[1:]:
            ref = NUMPY_OP[op](ref, x.astype(np.float64))
        eps = np.finfo(dtype).eps
        scale = np.sum([np.abs(x.astype(np.float64)) for x in inputs], axis=0) if op == ReduceOp.SUM else 1.0
        bad = np.abs(res.astype(np.float64) - ref) > SIZE * eps * scale + 1e-30
        if bad.any():
            i = int(np.argmax(bad))
            raise AssertionError(f"{what}: element {i} is {res[i]!r}, float64 reference {ref[i]!r}")
        if dtype == np.float16 and SIZE == 2:  # two inputs: one rounding, order-free, exact
            assert np.array_equal(res, NUMPY_OP[op](inputs[0], inputs[1])), what
    else:
        ref = inputs[0].copy()
        for x in inputs[1:]:
            ref = NUMPY_OP[op](ref, x)
        if not np.array_equal(res, ref):
            i = int(np.argmax(res != ref))
            raise AssertionError(f"{what}: element {i} is {res[i]!r}, expected {ref[i]!r}")


@contextlib.contextmanager
def algorithm(be, name):
    """``BLINKFLOW_ALGORITHM=name`` on the live backend for the block."""
    config = be.config
    be.config = dataclasses.replace(config, algorithm=name)
    try:
        yield
    finally:
        be.config = config


def run_allreduce(be, sizes):
    """Every size, dtype and op by the runner's trees; three small sizes again by MPI's own
    all-reduce (chunks do not apply to it), whose dtypes take it while the others stay on the
    runner."""
    from blinkflow.schedule import policy

    for forced in ("runner", "mpi"):
        with algorithm(be, forced):
            for seed, n in enumerate(sizes):
                if forced == "mpi" and n not in (1, 7, 1001):
                    continue
                for dtype in (DTYPES if n < 5000 else (np.float32, np.float16, np.int32, np.bool_)):
                    mpi = np.dtype(dtype).name in policy.MPI_DTYPES
                    if forced == "mpi" and not mpi and n > 1:
                        continue  # the runner's again: shown once
                    for op in OPS:
                        run_allreduce_once(be, n, dtype, op, seed, "mpi" if forced == "mpi" and mpi else "runner")


def run_allreduce_once(be, n, dtype, op, seed, expected):
    inputs = [data(r, n, dtype, seed) for r in range(SIZE)]
    reduces = SIZE > 1 and n > 0
    for shared in (True, False):
        buf = be.buffer(n, dtype) if shared else np.empty(n, dtype)
        buf[...] = inputs[RANK]
        be.last_choice = None
        be.allreduce(buf, op)
        what = f"allreduce n={n} {np.dtype(dtype).name} {op.name} shared={shared} ({expected})"
        assert not reduces or be.last_choice.algorithm == expected, (what, be.last_choice)
        expect_reduced(buf, inputs, op, what)
        check_same_everywhere(buf, what)
    if np.dtype(dtype) in (np.float32, np.float64):  # into a private array, scaled (the runtime's path);
        # float16 is left out: scaling a subnormal by 0.25 is not undone exactly by 4
        buf = be.buffer(n, dtype)
        buf[...] = inputs[RANK]
        out = np.empty(n, dtype)
        be.allreduce(buf, op, out=out, scale=0.25)  # a power of two: exactly undone below
        what = f"allreduce into out n={n} {np.dtype(dtype).name} {op.name} ({expected})"
        expect_reduced(out * np.dtype(dtype).type(4), inputs, op, what)
        check_same_everywhere(out, what)


def run_mpi_pieces(be):
    """The runtime's call (pieces, prescale, scale) of a small all-reduce under ``auto``: MPI's
    own all-reduce for MPI's dtypes, one piece read in place or several packed, every op; a
    dtype MPI cannot reduce (float16) stays on the runner."""
    from blinkflow.schedule import policy

    n = 1001
    for seed, dtype in enumerate((np.float32, np.float64, np.int32, np.uint8, np.float16)):
        for op in OPS:
            for cuts in ([0, n], [0, 1, 500, n]):
                inputs = [data(r, n, dtype, 90 + seed) for r in range(SIZE)]
                pieces = [inputs[RANK][a:b] for a, b in zip(cuts, cuts[1:])]
                before = [p.copy() for p in pieces]
                kind = np.dtype(dtype).kind
                scale, prescale = (0.25, 2.0) if kind == "f" and op == ReduceOp.SUM else (1.0, 1.0)
                out = np.empty(n, dtype)
                counted = dict(be.stats)
                with algorithm(be, "auto"):
                    be.allreduce_pieces(pieces, op, out=out, scale=scale, prescale=prescale)
                what = f"pieces {np.dtype(dtype).name} {op.name} in {len(pieces)} (prescale {prescale}, scale {scale})"
                mpi = np.dtype(dtype).name in policy.MPI_DTYPES
                if SIZE > 1:
                    assert be.stats["mpi"] == counted["mpi"] + mpi, (what, counted, be.stats)
                    assert be.stats["packed"] == counted["packed"] + (not mpi), (what, counted, be.stats)
                assert all(np.array_equal(p, b) for p, b in zip(pieces, before)), f"{what}: a piece was written"
                both = np.dtype(dtype).type(scale * prescale)
                expect_reduced(out / both if both != 1 else out, inputs, op, what)
                check_same_everywhere(out, what)


def run_broadcast(be):
    for n in (0, 1, 1000, 70001):
        for dtype in (np.float32, np.float16, np.int64, np.bool_):
            for root in range(SIZE):
                src = data(root, n, dtype, 11)
                for shared in (True, False):
                    buf = be.buffer(n, dtype) if shared else np.empty(n, dtype)
                    buf[...] = src if RANK == root else data(RANK, n, dtype, 12)
                    be.broadcast(buf, root)
                    assert np.array_equal(buf, src), f"broadcast n={n} root={root} shared={shared}"


def counts_for(seed, scale):
    rng = np.random.default_rng([seed, SIZE])
    counts = [int(c) for c in rng.integers(0, scale, SIZE)]
    if seed % 3 == 0:
        counts[seed % SIZE] = 0
    return counts


def run_allgather(be):
    for seed, scale in enumerate((1, 5, 3000, 90000)):
        counts = counts_for(seed, scale)
        for dtype in (np.float32, np.float16, np.int32, np.bool_):
            pieces = [data(r, counts[r], dtype, seed) for r in range(SIZE)]
            for shared in (True, False):
                send = be.buffer(counts[RANK], dtype) if shared else np.empty(counts[RANK], dtype)
                send[...] = pieces[RANK]
                recv = np.full(sum(counts), 1, dtype)
                be.allgather(send, recv, counts)
                assert np.array_equal(recv, np.concatenate(pieces)), f"allgather counts={counts}"


def run_reducescatter(be):
    for seed, scale in enumerate((1, 4, 2000, 80000)):
        counts = counts_for(seed + 7, scale)
        total = sum(counts)
        lo = sum(counts[:RANK])
        for dtype in (np.float32, np.float64, np.float16, np.int32, np.bool_):
            for op in OPS:
                inputs = [data(r, total, dtype, seed) for r in range(SIZE)]
                for mode in ("shared", "private", "inplace"):
                    send = be.buffer(total, dtype) if mode == "shared" else np.empty(total, dtype)
                    send[...] = inputs[RANK]
                    recv = send[lo:lo + counts[RANK]] if mode == "inplace" else np.empty(counts[RANK], dtype)
                    be.reducescatter(send, recv, counts, op)
                    mine = [x[lo:lo + counts[RANK]] for x in inputs]
                    expect_reduced(recv, mine, op, f"reducescatter counts={counts} {np.dtype(dtype).name} {op.name} {mode}")


def run_reducescatter_in_place_at_the_front(be):
    """MPI's in-place convention, ``recv`` the start of ``send``, with ``send`` in the shared
    window, which peers read in place, and rank 0 slow to read: the other ranks' results land
    on slice 0 of their sends, which rank 0 is still reading, unless they wait for it."""
    from blinkflow.backends.cpu import backend as cpu_backend

    reduce_into = cpu_backend.kernels.reduce_into
    if RANK == 0:
        def slow(*args, **kwargs):
            time.sleep(0.2)
            reduce_into(*args, **kwargs)

        cpu_backend.kernels.reduce_into = slow
    try:
        counts = [1000 + r for r in range(SIZE)]
        lo = sum(counts[:RANK])
        inputs = [data(r, sum(counts), np.float64, 31) for r in range(SIZE)]
        send = be.buffer(sum(counts), np.float64)
        send[...] = inputs[RANK]
        be.reducescatter(send, send, counts, ReduceOp.SUM)
        expect_reduced(send[:counts[RANK]], [x[lo:lo + counts[RANK]] for x in inputs], ReduceOp.SUM,
                       "reducescatter in place at the front of a shared send")
    finally:
        cpu_backend.kernels.reduce_into = reduce_into


def run_alltoall(be):
    rng = np.random.default_rng([5, SIZE])
    table = rng.integers(0, 4000, (SIZE, SIZE))  # table[s, d]: elements rank s sends to rank d
    for dtype in (np.float32, np.float16, np.int64):
        pieces = {(s, d): data(s * 1000 + d, int(table[s, d]), dtype, 3) for s in range(SIZE) for d in range(SIZE)}
        send = np.concatenate([pieces[(RANK, d)] for d in range(SIZE)])
        recv = np.empty(int(table[:, RANK].sum()), dtype)
        be.alltoall(send, list(table[RANK]), recv, list(table[:, RANK]))
        assert np.array_equal(recv, np.concatenate([pieces[(s, RANK)] for s in range(SIZE)])), "alltoall"


def run_growth(be):
    """The window grows and shrinks never: a view from before one growth stays usable, and
    windows from older generations are freed (collectively) without disturbing anything."""
    small = be.buffer(10, np.float32)
    small[...] = RANK
    for mib in (6, 12, 40, 3):  # 6 and 12 MiB outgrow the first windows; 3 MiB reuses the last
        big = be.buffer(mib * 1024 * 1024 // 4, np.float32)
        big[...] = 1
        be.allreduce(big, ReduceOp.SUM)
        assert (big == SIZE).all()
        if mib == 6:
            assert (small == RANK).all()
            be.allreduce(small, ReduceOp.MAX)
            assert (small == SIZE - 1).all()
    live = [w for w in be.arena.windows if w is not None]
    assert len(live) <= 3, f"{len(live)} windows alive"


def run_slot_reuse(be):
    """Calls on one slot without asking buffer() again in between (allowed while the caller does
    not write it): the runs on a slot settle each other's releases, so the deferred bookkeeping
    stays bounded, and every result is right. Then buffer() hands out memory nobody reads."""
    n = 5000
    with algorithm(be, "runner"):  # the runner's deferred releases (a call this small is otherwise MPI's)
        buf = be.buffer(n, np.float32)
        buf[...] = RANK + 1
        for i in range(20):
            be.allreduce(buf, ReduceOp.MAX)  # in place: every run writes the slot it reads
            assert (buf == SIZE).all(), f"slot reuse, call {i}"
            assert len(be.state.unsettled) <= 2, be.state.unsettled
        fresh = be.buffer(n, np.float32)
        fresh[...] = RANK
        be.allreduce(fresh, ReduceOp.SUM)
        assert (fresh == SIZE * (SIZE - 1) // 2).all(), "a fresh slot after reuse"


def run_deep_trees(config):
    """A plan of deeper trees (Blink's single-root shape: a chain and a binary tree, both rooted at
    rank 0, plus a chain rooted at the last rank), chunk-pipelined by the runner: forwarding
    (recv_send) and fused reduce-and-forward (recv_reduce_send) steps, inside a host (pull), and
    between pretend hosts (MPI) under split_hosts."""
    import dataclasses

    from blinkflow.planner.plan import Plan, Tree

    if SIZE < 2:
        skip("a tree needs two ranks")
    chain = tuple((r, r + 1) for r in range(SIZE - 1))
    binary = tuple(((r - 1) // 2, r) for r in range(1, SIZE))
    back = tuple((r + 1, r) for r in range(SIZE - 2, -1, -1))
    plan = Plan("allreduce", "test", tuple(range(SIZE)),
                (Tree(0, 0.3, chain), Tree(0, 0.3, binary), Tree(SIZE - 1, 0.4, back)), 1.0, 1.0)
    ctx = dataclasses.replace(standalone_context(MPI.COMM_WORLD, dataclasses.replace(config, algorithm="runner")),
                              plan_for=lambda c, root=None: plan)  # the runner's trees, also for small calls
    be = CpuBackend(ctx)
    be.chunk_bytes = 4096  # many chunks per tree: the pipeline runs
    for n in (1, 100, 50001):
        for dtype in (np.float32, np.float16, np.int64):
            for op in (ReduceOp.SUM, ReduceOp.MAX):
                inputs = [data(r, n, dtype, 31) for r in range(SIZE)]
                buf = be.buffer(n, dtype)
                buf[...] = inputs[RANK]
                be.allreduce(buf, op)
                expect_reduced(buf, inputs, op, f"deep trees n={n} {np.dtype(dtype).name} {op.name}")
                check_same_everywhere(buf, f"deep trees n={n}")
                buf = be.buffer(n, dtype)
                buf[...] = inputs[RANK]
                out = np.empty(n, dtype)
                be.allreduce(buf, op, out=out)  # forwarding ranks keep forwarded ranges in their buffer
                expect_reduced(out, inputs, op, f"deep trees into out n={n} {np.dtype(dtype).name} {op.name}")
                check_same_everywhere(out, f"deep trees into out n={n}")
    ops = set().union(*comm.allgather({a.op for a in be._program("allreduce", 50001, 4)[1].actions}))
    if SIZE > 2:  # somebody forwarded
        assert {"recv_send", "recv_reduce_send"} <= ops, ops
    be.close()


def run_single_copy_helping(be):
    """The single-copy all-reduce (peers' tensors read in place) with rank 0 slowed down: its
    neighbour-helper (the last rank) takes over the tail of its shard, and the results stay exact
    and bitwise identical, over pieces that chunks straddle."""
    from blinkflow.backends.cpu import single_copy, single_copy_path
    from blinkflow.schedule import policy

    if be.single_copy is None or be.layout.nhosts > 1:
        skip("no cross-memory attach here, or the three-phase path (not balanced)")
    thresholds = policy.SINGLE_COPY_MIN_SHARD_BYTES, policy.SINGLE_COPY_MIN_PIECE_BYTES, policy.MPI_ALLREDUCE_MAX_BYTES
    # small calls by the single copy: below its size threshold, and not MPI's own all-reduce
    policy.SINGLE_COPY_MIN_SHARD_BYTES = policy.SINGLE_COPY_MIN_PIECE_BYTES = policy.MPI_ALLREDUCE_MAX_BYTES = 0
    chunk_bytes, be.chunk_bytes = be.chunk_bytes, 4096  # BLINKFLOW_CHUNK_BYTES: many chunks per shard
    run = single_copy.ChunkReducer.run
    if RANK == 0:
        def slow(self, *args):
            time.sleep(0.002)
            run(self, *args)

        single_copy.ChunkReducer.run = slow
    try:
        before = be.stats["helped_chunks"]
        for dtype, op in ((np.float32, ReduceOp.SUM), (np.float16, ReduceOp.MAX), (np.int32, ReduceOp.PRODUCT)):
            n = 50_003
            inputs = [data(r, n, dtype, 21) for r in range(SIZE)]
            mine = inputs[RANK]
            out = np.empty(n, dtype)
            be.allreduce_pieces([mine[:20_001], mine[20_001:20_500], mine[20_500:]], op, out=out)
            what = f"single-copy helped n={n} {np.dtype(dtype).name} {op.name}"
            assert (be.last_choice.algorithm, be.last_choice.chunk_bytes) == ("single_copy", 4096), be.last_choice
            expect_reduced(out, inputs, op, what)
            check_same_everywhere(out, what)
        helped = comm.allgather(be.stats["helped_chunks"] - before)
        assert helped[SIZE - 1] > 0, f"rank 0 was slowed down but nobody helped it: {helped}"
    finally:
        single_copy.ChunkReducer.run = run
        be.chunk_bytes = chunk_bytes
        policy.SINGLE_COPY_MIN_SHARD_BYTES, policy.SINGLE_COPY_MIN_PIECE_BYTES, policy.MPI_ALLREDUCE_MAX_BYTES = thresholds


def run_packed_in_stages(be):
    """A packed all-reduce longer than a stage runs stage by stage through the shared window,
    pieces straddling the stages' boundaries, the last stage shorter: the result is the
    whole call's."""
    from blinkflow.schedule import policy

    single_copy, config, chunk_bytes = be.single_copy, be.config, be.chunk_bytes
    stage_bytes = policy.CPU_STAGE_BYTES, policy.CPU_CROSS_HOST_STAGE_BYTES
    be.single_copy = None  # the packed path, whatever this machine allows
    be.config = dataclasses.replace(config, algorithm="runner")  # small chunks make a small call: not MPI's
    # 64 KiB chunks unless the job runs smaller ones: stages of a chunk each, and a call of a few
    # stages whose float64 reference costs milliseconds (the default 4 MiB chunk's took seconds).
    be.chunk_bytes = min(chunk_bytes or 1 << 16, 1 << 16)
    try:
        for seed, (dtype, op) in enumerate([(np.float32, ReduceOp.SUM), (np.int32, ReduceOp.MAX)]):
            itemsize = np.dtype(dtype).itemsize
            chunk = be._choose("allreduce", 1 << 30, itemsize).chunk_elems(itemsize)
            # a stage of one chunk, on one host or across hosts
            policy.CPU_STAGE_BYTES = policy.CPU_CROSS_HOST_STAGE_BYTES = chunk * itemsize
            n = 2 * chunk + chunk // 2 + 7
            assert be._choose("allreduce", n * itemsize, itemsize).stage_elems(n, itemsize) == chunk
            inputs = [data(r, n, dtype, 40 + seed) for r in range(SIZE)]
            mine = inputs[RANK]
            cuts = [0, 5, chunk - 3, chunk + 1, 2 * chunk + 11, n]
            pieces = [mine[a:b] for a, b in zip(cuts, cuts[1:])]
            out = np.empty(n, dtype)
            packed = be.stats["packed"]
            scale = 0.25 if np.dtype(dtype).kind == "f" else 1.0
            prescale = 2.0 if np.dtype(dtype).kind == "f" else 1.0  # powers of two: exact
            be.allreduce_pieces(pieces, op, out=out, scale=scale, prescale=prescale)
            what = f"packed in stages n={n} {np.dtype(dtype).name} {op.name}"
            assert SIZE == 1 or be.stats["packed"] == packed + 1, what
            both = np.dtype(dtype).type(scale * prescale)
            expect_reduced(out / both if both != 1 else out, inputs, op, what)
            check_same_everywhere(out, what)
    finally:
        be.single_copy, be.config, be.chunk_bytes = single_copy, config, chunk_bytes
        policy.CPU_STAGE_BYTES, policy.CPU_CROSS_HOST_STAGE_BYTES = stage_bytes


def run_shape_decided_once(be):
    """The policy decides an all-reduce's algorithm and stages on the first call of its shape,
    asked once; later calls of that shape (a training loop's every step) reuse the decision and
    still reduce correctly: MPI's own all-reduce (float32), the runner (float16), and, where
    this host allows it, the single copy (its size threshold lowered)."""
    from blinkflow.schedule import policy

    asked = []
    choose = policy.choose
    policy.choose = lambda *args, **kwargs: asked.append(args[0]) or choose(*args, **kwargs)
    thresholds = policy.SINGLE_COPY_MIN_SHARD_BYTES, policy.SINGLE_COPY_MIN_PIECE_BYTES, policy.MPI_ALLREDUCE_MAX_BYTES
    try:
        expected = [(np.float32, "mpi"), (np.float16, "runner")]
        if be.single_copy is not None and be.layout.nhosts == 1:
            expected.append((np.float64, "single_copy"))
        for seed, (dtype, algorithm) in enumerate(expected):
            if algorithm == "single_copy":  # a small call by the single copy
                policy.SINGLE_COPY_MIN_SHARD_BYTES = policy.SINGLE_COPY_MIN_PIECE_BYTES = 0
                policy.MPI_ALLREDUCE_MAX_BYTES = 0
            n = 3001 + seed  # shapes no other case uses
            inputs = [data(r, n, dtype, 70 + seed) for r in range(SIZE)]
            pieces = [inputs[RANK][:1000], inputs[RANK][1000:]]
            before = len(asked)
            for call in range(3):
                out = np.empty(n, dtype)
                be.allreduce_pieces(pieces, ReduceOp.SUM, out=out)
                expect_reduced(out, inputs, ReduceOp.SUM, f"call {call} of one {np.dtype(dtype).name} shape")
                if call == 0:
                    first = len(asked) - before
                    assert SIZE == 1 or be.last_choice.algorithm == algorithm, (algorithm, be.last_choice)
            assert SIZE == 1 or first == 1, f"the policy was asked {first} times for a new shape: {asked[before:]}"
            assert len(asked) - before == first, f"the policy was asked again for a known shape: {asked[before:]}"
    finally:
        policy.choose = choose
        policy.SINGLE_COPY_MIN_SHARD_BYTES, policy.SINGLE_COPY_MIN_PIECE_BYTES, policy.MPI_ALLREDUCE_MAX_BYTES = thresholds


def run_mailbox_rings():
    """The shared-memory control rings (mailbox.py) with 4 slots each. A full ring refuses a
    message rather than wait (its receiver may be outside the runner): every rank posts to every
    peer of its host until refused, exactly 4 get in and arrive in order, and room comes back once
    they were read. Then 3000 per peer, posts and reads interleaved at random, a refused message
    retried later, so counts are read while they are written (a count written in two steps, e.g.
    zeroed first, read as 0 let a sender overwrite unread messages). Every sender's messages
    arrive whole and in order; a message to this rank itself is refused with BackendError."""
    import random

    from blinkflow.backends.cpu.mailbox import Mailbox, shared_memory_ordered
    from blinkflow.errors import BackendError

    if not shared_memory_ordered():
        skip("this CPU does not order shared-memory stores: control messages go over MPI")
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    ranks = local.allgather(RANK)
    box = Mailbox(local, ranks, slots=4)
    peers = [r for r in ranks if r != RANK]
    refused = None
    try:
        box.post(RANK, (1, RANK, 2, 0, 0, 0))
    except BackendError as e:
        refused = e
    assert refused is not None, "a message to this rank itself was taken"
    for peer in peers:
        taken = 0
        while box.post(peer, (1, RANK, 2, taken, peer, -taken)):
            taken += 1
        assert taken == 4, f"a ring of 4 slots took {taken} messages"
    local.Barrier()
    got = {r: [] for r in peers}
    for message in box.poll():
        got[message[1]].append(message)
    assert all(m == [(1, s, 2, k, RANK, -k) for k in range(4)] for s, m in got.items()), got
    local.Barrier()  # every ring was read: each takes 4 more
    for peer in peers:
        assert all(box.post(peer, (1, RANK, 2, 4 + k, peer, -4 - k)) for k in range(4))
    local.Barrier()
    assert sorted(m[3] for m in box.poll()) == sorted(list(range(4, 8)) * len(peers))
    local.Barrier()
    rng = random.Random(RANK)
    count = 3000
    got = {r: [] for r in peers}
    sent = {r: 0 for r in peers}
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < count * len(peers) or min(sent.values(), default=count) < count:
        assert time.monotonic() < deadline, f"mailbox: sent {sent}, got {[len(m) for m in got.values()]}"
        unsent = [r for r in peers if sent[r] < count]
        if unsent and rng.random() < 0.6:
            peer = rng.choice(unsent)
            if box.post(peer, (1, RANK, 2, sent[peer], peer, -sent[peer])):
                sent[peer] += 1
            continue
        for message in box.poll():
            got[message[1]].append(message)
    for src, messages in got.items():
        bad = [(k, m) for k, m in enumerate(messages) if m != (1, src, 2, k, RANK, -k)]
        assert not bad, f"from rank {src}: first wrong message {bad[0]}"
    local.Barrier()
    box.close()
    local.Free()


def run_spilled_control(config):
    """A call on buffer()'s slot returns before its readers' FREEs (deferred releases), so a rank
    may sit in a blocking collective while a peer still owes it one FREE per chunk. With rings of
    16 slots and broadcasts and all-reduces of ~40 chunks, followed at once by an MPI collective
    (alltoall), the FREEs overflow the ring: they must go over MPI instead of waiting for room
    (waiting hung the job: the owed rank waits in the collective for the rank that waits for
    room). Results stay exact, and the overflow did happen."""
    from blinkflow.backends.cpu import mailbox

    if not mailbox.shared_memory_ordered() or SIZE == 1:
        skip("needs two ranks and a CPU that orders shared-memory stores")
    slots = mailbox.MAX_SLOTS
    mailbox.MAX_SLOTS = 16
    try:
        be = CpuBackend(standalone_context(MPI.COMM_WORLD, dataclasses.replace(config, chunk_bytes=4096,
                                                                               algorithm="runner")))
    finally:
        mailbox.MAX_SLOTS = slots
    assert be.mailbox is None or be.mailbox.slots == 16  # None: alone on its (split) host
    n = 40 * 1024  # float32: 40 chunks of 4 KiB
    counts = [1] * SIZE
    sends, recvs = np.arange(SIZE, dtype=np.int64) + 100 * RANK, np.empty(SIZE, np.int64)
    for root in range(SIZE):
        buf = np.full(n, RANK + 1, np.float32)
        be.broadcast(buf, root)
        assert (buf == root + 1).all(), f"broadcast from {root}"
        be.alltoall(sends, counts, recvs, counts)  # blocking MPI while the root's FREEs are owed
        assert list(recvs) == [RANK + 100 * r for r in range(SIZE)]
        summed = np.full(n, RANK + 1, np.float32)
        be.allreduce(summed, ReduceOp.SUM)
        assert (summed == SIZE * (SIZE + 1) / 2).all(), "allreduce"
        be.alltoall(sends, counts, recvs, counts)
    spilled = comm.allgather(None if be.mailbox is None else sum(be.mailbox._spilled))
    assert all(s is None for s in spilled) or sum(s or 0 for s in spilled) > 0, \
        f"no control message overflowed its ring ({spilled}): the case tests nothing"
    be.close()


def run_spilled_sends_progress():
    """Control messages that overflowed their ring go over MPI, and an MPI moves a send on only
    while its sender calls into it: with thousands in flight, Open MPI's shared-memory queue to
    the peer fills and the rest wait in the sender. Rank 0 posts 20000 READYs to rank 1 through a
    4-slot ring (rank 1 starts reading late, so nearly all spill) and then only waits in the wire
    for rank 1's answer, which comes once rank 1 got every READY. The wire must keep its spilled
    sends moving while it waits: without that both ranks waited for ever (seen as a 3-rank hang
    of 4 KiB-chunk all-reduces of 40 MiB)."""
    from blinkflow.backends.cpu.mailbox import Mailbox, shared_memory_ordered
    from blinkflow.backends.wire import MpiWire
    from blinkflow.schedule.transport import FREE, READY

    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    ranks = local.allgather(RANK)
    wire_comm = comm.Dup()  # every rank of the job: a host with one rank still takes part
    if not shared_memory_ordered() or len(ranks) < 2:
        comm.Barrier()
        teardown.free(wire_comm)
        local.Free()
        skip("needs two ranks on this machine and a CPU that orders shared-memory stores")
    box = Mailbox(local, ranks, slots=4)
    wire = MpiWire(wire_comm, box)  # as the backend has it: global ranks, the host's in the box
    # A flag in shared memory, not an MPI call: an MPI call would move the spilled sends on.
    flag_window = MPI.Win.Allocate_shared(8 if local.Get_rank() == 0 else 0, 8, comm=local)
    flag = np.frombuffer(flag_window.Shared_query(0)[0], np.int64, 1)
    flag[0] = 0
    local.Barrier()
    n = 20000
    first, second = ranks[0], ranks[1]
    if RANK == first:
        for seq in range(n):
            wire.post(second, READY, 0, seq)
        flag[0] = 1
        answer = []
        while not answer:
            answer = [e for e in wire.wait() if e[0] == FREE]
        assert answer[0][3] == n and sum(box._spilled) == n - 4, (answer, box._spilled)
    elif RANK == second:
        while not flag[0]:  # the first posts them all before anything is read: 4 fit in the ring
            time.sleep(0.001)
        seen = set()
        while len(seen) < n:
            seen.update(e[3] for e in wire.wait() if e[0] == READY)
        assert seen == set(range(n))
        wire.post(first, FREE, 0, n)
    wire.flush()
    comm.Barrier()
    wire.close()
    teardown.free(wire.comm)
    box.close()
    del flag
    flag_window.Free()
    local.Free()


def case_allreduce(r, n):
    run_allreduce(BACKEND, [0, 1, 2, 7, n + 1, 1001, 20011])


def case_mpi_pieces(r, n):
    run_mpi_pieces(BACKEND)


def case_allreduce_large(r, n):
    run_allreduce(BACKEND, [300007])


def case_broadcast(r, n):
    run_broadcast(BACKEND)


def case_allgather(r, n):
    run_allgather(BACKEND)


def case_reducescatter(r, n):
    run_reducescatter(BACKEND)


def case_reducescatter_in_place_at_the_front(r, n):
    run_reducescatter_in_place_at_the_front(BACKEND)


def case_alltoall(r, n):
    run_alltoall(BACKEND)


def case_growth(r, n):
    run_growth(BACKEND)


def case_slot_reuse(r, n):
    run_slot_reuse(BACKEND)


def case_packed_in_stages(r, n):
    if n == 1:
        skip("one rank reduces nothing: the call is a copy")
    run_packed_in_stages(BACKEND)


def case_shape_decided_once(r, n):
    if n == 1:
        skip("one rank reduces nothing: the call is a copy, no policy is asked")
    run_shape_decided_once(BACKEND)


def case_mailbox_rings(r, n):
    run_mailbox_rings()


def case_spilled_control(r, n):
    run_spilled_control(CONFIG)


def case_spilled_sends_progress(r, n):
    run_spilled_sends_progress()


def case_deep_trees(r, n):
    run_deep_trees(CONFIG)


def case_single_copy_helping(r, n):
    if n == 1:
        skip("one rank has nobody to help it")
    run_single_copy_helping(BACKEND)


def main():
    global BACKEND, CONFIG
    # A hang shows where every rank waits, before the test's timeout ends the job (a slow run
    # on a loaded machine goes on).
    faulthandler.dump_traceback_later(240, exit=False)
    CONFIG = Config.from_env()
    BACKEND = CpuBackend(standalone_context(MPI.COMM_WORLD, CONFIG))
    run_cases(globals(), RANK, SIZE, sys.argv[1:])
    comm.Barrier()
    BACKEND.close()
    BACKEND.close()


if __name__ == "__main__":
    main()
