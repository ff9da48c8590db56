"""The verifier rejects every kind of broken plan, naming what is wrong."""
import dataclasses

import pytest

from blinkflow.errors import PlanError
from blinkflow.planner import Route, Tree, make_plan, verify_plan
from blinkflow.topology.presets import get_preset


@pytest.fixture(scope="module")
def topo():
    return get_preset("dgx1-v100")


@pytest.fixture(scope="module")
def plan(topo):
    return make_plan(topo, "broadcast", [0, 1, 2, 3], root=0)


def _with_tree(plan, i, **changes):
    trees = list(plan.trees)
    trees[i] = dataclasses.replace(trees[i], **changes)
    return dataclasses.replace(plan, trees=tuple(trees))


def test_good_plan_passes(plan, topo):
    verify_plan(plan, topo)


def test_wrong_rate(plan, topo):
    with pytest.raises(PlanError, match="reach"):
        verify_plan(dataclasses.replace(plan, rate_gbps=plan.rate_gbps * 1.01, optimal_gbps=1e9), topo)


def test_rate_above_optimum(plan, topo):
    with pytest.raises(PlanError, match="optimum"):
        verify_plan(dataclasses.replace(plan, optimal_gbps=plan.rate_gbps / 2), topo)


def test_fractions_must_sum_to_one(plan, topo):
    with pytest.raises(PlanError, match="sum"):
        verify_plan(_with_tree(plan, 0, fraction=plan.trees[0].fraction + 0.1), topo)


def test_not_spanning(plan, topo):
    with pytest.raises(PlanError, match="reach|spanning"):
        verify_plan(_with_tree(plan, 0, edges=plan.trees[0].edges[:-1]), topo)


def test_two_parents(plan, topo):
    edges = plan.trees[0].edges
    child = edges[-1][1]
    other = next(d for d in plan.devices if d not in (child, edges[-1][0]))
    with pytest.raises(PlanError, match="two parents"):
        verify_plan(_with_tree(plan, 0, edges=edges + ((other, child),)), topo)


def test_wrong_root_for_broadcast(plan, topo):
    with pytest.raises(PlanError, match="root"):
        verify_plan(dataclasses.replace(plan, root=1), topo)


def test_edge_without_link(topo):
    plan = make_plan(topo, "broadcast", [1, 4, 5], root=1)  # 1 and 4 share no NVLink
    bad = _with_tree(plan, 0, edges=((1, 4), (4, 5)))
    with pytest.raises(PlanError, match="neither a link nor routed"):
        verify_plan(bad, topo)


def test_route_through_gpu_rejected(topo):
    plan = make_plan(topo, "broadcast", [1, 4, 5], root=1)
    bad = dataclasses.replace(_with_tree(plan, 0, edges=((1, 4), (4, 5))),
                              routes=(Route(1, 4, (1, 0, 4)),))
    with pytest.raises(PlanError, match="compute device"):
        verify_plan(bad, topo)


def test_overloaded_link(topo):
    plan = make_plan(topo, "broadcast", [0, 1], root=0)
    with pytest.raises(PlanError):
        verify_plan(dataclasses.replace(plan, rate_gbps=50.0, optimal_gbps=50.0), topo)


def test_unknown_device(plan, topo):
    with pytest.raises(PlanError, match="not a compute device"):
        verify_plan(dataclasses.replace(plan, devices=(0, 1, 2, 99)), topo)


def test_three_phase_slices_must_tile(topo):
    multi = get_preset("2xcpu-host:2")
    plan = make_plan(multi, "allreduce")
    groups = list(plan.cross)
    groups[0] = dataclasses.replace(groups[0], stop=groups[0].stop / 2)
    with pytest.raises(PlanError, match="slice"):
        verify_plan(dataclasses.replace(plan, cross=tuple(groups)), multi)
    groups = list(plan.cross)
    groups[0] = dataclasses.replace(groups[0], devices=(0, 1))
    with pytest.raises(PlanError, match="one device per host"):
        verify_plan(dataclasses.replace(plan, cross=tuple(groups)), multi)


def test_route_over_a_missing_link_rejected(topo):
    # pcie0 holds GPUs 0 and 1; GPU 4 sits behind pcie2, so pcie0 -> 4 is no link.
    plan = make_plan(topo, "broadcast", [1, 4, 5], root=1)
    bad = dataclasses.replace(_with_tree(plan, 0, edges=((1, 4), (4, 5))),
                              routes=(Route(1, 4, (1, "pcie0", 4)),))
    with pytest.raises(PlanError, match="pcie0->4, which is not a link"):
        verify_plan(bad, topo)


def test_three_phase_group_plan_must_be_over_its_devices():
    multi = get_preset("2xcpu-host:2")
    plan = make_plan(multi, "allreduce")
    groups = list(plan.cross)
    other = next(g for g in groups if g.devices != groups[0].devices)
    groups[0] = dataclasses.replace(groups[0], plan=other.plan)
    with pytest.raises(PlanError, match="carries a plan over"):
        verify_plan(dataclasses.replace(plan, cross=tuple(groups)), multi)
