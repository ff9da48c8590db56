"""The CPU executor's view of a plan: trees in local ranks, shards, levels (pure, no MPI)."""
import pytest

from blinkflow.backends.cpu import kernels
from blinkflow.backends.cpu.trees import local_trees, single_root_star, star_trees
from blinkflow.errors import BackendError
from blinkflow.ops import ReduceOp
from blinkflow.planner.plan import Plan, Tree

import numpy as np


def _plan(trees, devices):
    return Plan(collective="allreduce", topology="test", devices=tuple(devices), trees=tuple(trees),
                rate_gbps=1.0, optimal_gbps=1.0)


def test_stars_are_one_level_each_way():
    t = star_trees(4)
    assert [tr.root for tr in t.trees] == [0, 1, 2, 3]
    assert t.shards(10) == [(0, 3), (3, 3), (6, 2), (8, 2)]
    (level,) = t.reduce_levels()
    assert level == [(i, i, tuple(r for r in range(4) if r != i)) for i in range(4)]
    (down,) = t.broadcast_levels()
    assert len(down) == 12 and all(child != parent for _, child, parent in down)


def test_shards_cover_the_buffer_contiguously():
    for n in (0, 1, 5, 1001):
        shards = star_trees(3).shards(n)
        assert shards[0][0] == 0 and sum(c for _, c in shards) == n
        assert all(o1 + c1 == o2 for (o1, c1), (o2, _) in zip(shards, shards[1:]))


def test_deep_tree_is_reduced_deepest_level_first():
    # device ids 10..13 on this host; a chain 10 -> 11 -> 12 and 11 -> 13
    plan = _plan([Tree(10, 1.0, ((10, 11), (11, 12), (11, 13)))], [10, 11, 12, 13])
    t = local_trees(plan, [10, 11, 12, 13])
    assert t.reduce_levels() == [[(0, 1, (2, 3))], [(0, 0, (1,))]]
    assert t.broadcast_levels() == [[(0, 1, 0)], [(0, 2, 1), (0, 3, 1)]]


def test_three_phase_plan_picks_this_hosts_intra_plan():
    host0 = _plan([Tree(0, 0.5, ((0, 1),)), Tree(1, 0.5, ((1, 0),))], [0, 1])
    host1 = _plan([Tree(2, 0.5, ((2, 3),)), Tree(3, 0.5, ((3, 2),))], [2, 3])
    whole = Plan(collective="allreduce", topology="2xcpu-host:2", devices=(0, 1, 2, 3), trees=(), rate_gbps=1.0,
                 optimal_gbps=1.0, intra=(host0, host1))
    t = local_trees(whole, [2, 3])
    assert [tr.root for tr in t.trees] == [0, 1] and t.signature == local_trees(whole, [0, 1]).signature


def test_foreign_plan_falls_back_to_stars_and_bad_trees_raise():
    assert local_trees(_plan([Tree(0, 1.0, ((0, 1),))], [0, 1]), [5, 6]).signature == star_trees(2).signature
    with pytest.raises(BackendError):
        local_trees(_plan([Tree(0, 1.0, ((0, 1),))], [0, 1, 2]), [0, 1, 2])  # does not span 2
    assert single_root_star(3).reduce_levels() == [[(0, 0, (1, 2))]]


def test_reduce_into_keeps_a_fixed_order_in_chunks():
    rng = np.random.default_rng(0)
    xs = [rng.uniform(-1, 1, 1003).astype(np.float16) for _ in range(4)]
    out = xs[0].copy()
    kernels.reduce_into(out, [out] + xs[1:], kernels.combiner(ReduceOp.SUM), chunk=64)
    assert np.array_equal(out, ((xs[0] + xs[1]) + xs[2]) + xs[3])
    with pytest.raises(BackendError):
        kernels.combiner(99)
