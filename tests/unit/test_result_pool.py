"""The result pool recycles a block only when no array or view of it is alive."""
import numpy as np

from blinkflow.runtime.result_pool import HUGE_PAGE, MIN_POOLED_BYTES, PAGE, ResultPool

MB = 1 << 20


def test_small_results_are_plain_numpy():
    pool = ResultPool(64 * MB)
    assert pool.empty(MIN_POOLED_BYTES - 1).base is None
    assert pool.held_bytes == 0


def test_block_is_reused_only_after_every_view_dies():
    pool = ResultPool(64 * MB)
    a = pool.empty(4 * MB).view(np.float32).reshape(1024, 1024)
    a[...] = 7.0
    view = a[10:20].T
    del a
    b = pool.empty(4 * MB)          # `view` still uses the first block: a second one is made
    assert len(pool.blocks) == 2
    b[...] = 0
    assert np.all(view == 7.0)      # the live view was not overwritten
    del view, b
    pool.empty(4 * MB)
    assert len(pool.blocks) == 2   # recycled, not grown


def test_capacity_bounds_growth_and_falls_back_to_numpy():
    pool = ResultPool(8 * MB)
    held = [pool.empty(4 * MB), pool.empty(4 * MB)]
    extra = pool.empty(4 * MB)      # both blocks are in use and the pool is full
    assert pool.held_bytes == 8 * MB and extra.base is None
    held.clear()
    big = pool.empty(8 * MB)        # idle blocks are dropped to make room
    assert pool.held_bytes == 8 * MB and big.nbytes == 8 * MB


def test_a_large_idle_block_does_not_serve_much_smaller_results():
    pool = ResultPool(64 * MB)
    pool.empty(16 * MB)             # idle at once
    pool.empty(2 * MB)              # 16 MiB > 2 x 2 MiB: gets a block of its own size
    assert sorted(block.size for block in pool.blocks) == [2 * MB, 16 * MB]
    pool.empty(10 * MB)             # 16 MiB <= 2 x 10 MiB: the idle large block serves it
    assert len(pool.blocks) == 2


def test_blocks_start_on_a_huge_page_boundary_and_are_private():
    # Peers write results into these blocks by process_vm_writev: on 4 KiB pages (a shared
    # mapping cannot have transparent huge pages by default) such copies ran at half speed.
    pool = ResultPool(64 * MB)
    a = pool.empty(3 * MB + 5)
    assert a.__array_interface__["data"][0] % HUGE_PAGE == 0
    assert pool.held_bytes == 3 * MB + PAGE
    a[...] = 1
    import os
    pid = os.fork()
    if pid == 0:  # a private mapping: the child's write is its own
        a[...] = 2
        os._exit(0)
    os.waitpid(pid, 0)
    assert np.all(a == 1)


def test_a_block_stays_lent_while_anything_made_from_its_array_lives():
    # Whatever keeps a result's memory reachable (a view of a view, a memoryview, a dtype view)
    # keeps its block lent: later results get other blocks, and the held one keeps its values.
    pool = ResultPool(64 * MB)
    keepers = []
    for make in (lambda a: a[MB:].view(np.float32)[::2], lambda a: memoryview(a)[5:],
                 lambda a: a.reshape(2, -1)[1]):
        a = pool.empty(2 * MB)
        a[...] = len(keepers) + 1
        keepers.append(make(a))
        del a
    assert [b.lent for b in pool.blocks] == [True, True, True]
    for _ in range(5):  # later calls reuse the pool, never the held blocks
        pool.empty(2 * MB)[...] = 99
    assert len(pool.blocks) == 4
    assert np.all(keepers[0] == np.frombuffer(b"\x01" * 4, np.float32)[0])
    assert bytes(keepers[1][:3]) == b"\x02\x02\x02"
    assert np.all(keepers[2] == 3)
    keepers.clear()
    assert not any(b.lent for b in pool.blocks)


def test_an_array_dropped_in_another_thread_returns_its_block():
    import threading

    pool = ResultPool(64 * MB)
    box = [pool.empty(2 * MB)]
    worker = threading.Thread(target=box.clear)
    worker.start()
    worker.join()
    assert not pool.blocks[0].lent
    pool.empty(2 * MB)
    assert len(pool.blocks) == 1
