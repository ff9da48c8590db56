"""The single-copy phase 1's balancing protocol (single_copy.reduce_balanced) on simulated ranks:
threads sharing control words, a fake reducer that records which chunks it computed. Every chunk
is computed at least once whatever the timing, and a slow rank's neighbour takes over its tail."""
import random
import threading
import time

import pytest

from blinkflow.backends.cpu import single_copy


class Recorder:
    """Stands in for ChunkReducer: chunks of ``chunk`` elements; ``run`` records and may dawdle."""

    def __init__(self, me, chunk, done, delay):
        self.me, self.chunk, self.done, self.delay = me, chunk, done, delay

    def chunks(self, offset, count):
        return [(lo, min(offset + count, lo + self.chunk)) for lo in range(offset, offset + count, self.chunk)]

    def run(self, owner, kids, lo, hi):
        time.sleep(self.delay(self.me))
        self.done.append((self.me, owner, lo, hi))


def simulate(size, elements, chunk, delay):
    words = [memoryview(bytearray(8 * 16)).cast("Q") for _ in range(size)]
    shards, at = [], 0
    for r in range(size):  # split like trees.shards: the first ranks get the extra elements
        count = elements // size + (r < elements % size)
        shards.append((at, count))
        at += count
    by_owner = {r: (r, tuple(q for q in range(size) if q != r)) for r in range(size)}
    for r in range(size):
        single_copy.progress_start(words[r], -(-shards[r][1] // chunk))
    done, helped = [], [0] * size
    barrier = threading.Barrier(size)

    def rank(r):
        barrier.wait()  # the entry barrier: every rank's progress words are set
        helped[r] = single_copy.reduce_balanced(Recorder(r, chunk, done, delay), words, by_owner, shards)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return done, helped, shards


def covered(done, elements):
    seen = [0] * elements
    for _, _, lo, hi in done:
        for i in range(lo, hi):
            seen[i] += 1
    return seen


@pytest.mark.parametrize("size", [2, 3, 4])
def test_a_slow_rank_is_helped_and_every_chunk_is_computed_for_its_owner(size):
    elements, chunk = 1000, 10
    done, helped, shards = simulate(size, elements, chunk, lambda me: 0.004 if me == 0 else 0.0)
    assert min(covered(done, elements)) >= 1
    for who, owner, lo, hi in done:  # a chunk is computed as its owner's (the canonical order's key)
        start, count = shards[owner]
        assert start <= lo < hi <= start + count and (lo - start) % chunk == 0
    assert helped[size - 1] > 5, helped  # rank 0's neighbour-helper took over a good part of its shard
    assert len(done) <= elements // chunk + size  # at most one chunk computed twice per pair


@pytest.mark.parametrize("size", [2, 3, 4])
def test_no_chunk_is_ever_left_out_under_random_timing(size):
    rng = random.Random(size)
    for trial in range(15):
        elements, chunk = rng.randint(0, 400), rng.randint(1, 40)
        delays = [rng.choice([0.0, 0.0002, 0.001]) for _ in range(size)]
        done, _, _ = simulate(size, elements, chunk, lambda me: delays[me] * rng.random())
        assert min(covered(done, elements), default=1) >= 1, (trial, elements, chunk, delays)
