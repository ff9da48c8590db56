"""The planner at cluster scale (issue 19): work that does not grow with the number of identical
hosts is done once, and start-up does not pay for what only the tools show. Counted, not timed."""
import json
import pickle
from fractions import Fraction

import pytest

from blinkflow.planner import Plan, crosshost, make, make_plan, multihost, ring, verify_plan
from blinkflow.planner.network import Network
from blinkflow.planner.single import allreduce
from blinkflow.planner.star import uniform_star_allreduce
from blinkflow.topology.presets import get_preset


def _count(monkeypatch, module, name):
    calls = []
    original = getattr(module, name)

    def counting(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


@pytest.mark.parametrize("spec", ["dgx1-v100", "2xdgx1-v100"])
def test_make_plan_solves_the_ring_baseline_only_when_asked(monkeypatch, spec):
    calls = _count(monkeypatch, make, "ring_gbps")
    topology = get_preset(spec)
    assert make_plan(topology, "allreduce").ring_gbps == 0.0 and calls == []
    shown = make_plan(topology, "allreduce", ring=True)
    assert len(calls) == 1 and shown.ring_gbps == pytest.approx(ring.ring_gbps(topology, topology.compute_ids,
                                                                                 "allreduce"))


@pytest.mark.parametrize("spec", ["dgx1-v100", "dgx-a100", "cpu-host:3"])
def test_identical_hosts_are_packed_once(monkeypatch, spec):
    # The host's phase-1/3 packing is the per-host work: N identical hosts pay for it once, and
    # every group of the network phase is a uniform star, written down without a packing.
    calls = _count(monkeypatch, multihost, "allreduce")
    for hosts in (2, 4, 8):
        calls.clear()
        plan = make_plan(get_preset(f"{hosts}x{spec}"), "allreduce")
        assert len(plan.intra) == hosts and len(calls) == 1
        assert plan.rate_gbps == pytest.approx(plan.optimal_gbps)


def test_hosts_of_another_shape_get_their_own_packing(monkeypatch):
    # Two DGX-1 hosts and one with GPUs 3 and 7 left out: two shapes, two packings; the relabelled
    # copy is a correct plan of the second DGX-1 (the verifier inside make_plan checks it).
    calls = _count(monkeypatch, multihost, "allreduce")
    topology = get_preset("3xdgx1-v100")
    devices = [d for d in topology.compute_ids if d not in (19, 23)]
    plan = make_plan(topology, "allreduce", devices)
    assert len([c for c in calls if len(c[0].devices) > 3]) == 2
    assert [p.devices for p in plan.intra] == [tuple(range(8)), tuple(range(8, 16)),
                                               (16, 17, 18, 20, 21, 22)]


@pytest.mark.parametrize("n", range(2, 11))
def test_uniform_star_is_what_forestcoll_packs(n):
    # The closed form (star.py) against the general machinery on the same star, tree for tree.
    members = [8 * i for i in range(n)]
    caps = {}
    for m in members:
        caps[(m, "net")] = caps[("net", m)] = Fraction(12)
    packed = allreduce(Network(tuple(members), caps, "main"), forestcoll_only=True)
    star = uniform_star_allreduce(members, "net", Fraction(12))
    assert (star.trees, star.paths, star.rate, star.optimal, star.algorithm) == \
        (packed.trees, packed.paths, packed.rate, packed.optimal, packed.algorithm)


@pytest.mark.parametrize("collective, packer", [("broadcast", "broadcast"), ("allgather", "allgather")])
def test_identical_hosts_are_packed_once_across_hosts(monkeypatch, collective, packer):
    # Broadcast needs each host's packing from the device where the data enters it (one per
    # position a chain uses), all-gather one packing per host: both once per host shape.
    calls = _count(monkeypatch, crosshost, packer)
    counts = []
    for hosts in (2, 4, 8):
        calls.clear()
        plan = make_plan(get_preset(f"{hosts}xdgx1-v100"), collective)
        assert plan.rate_gbps == pytest.approx(plan.optimal_gbps)
        counts.append(len(calls))
    assert counts[0] == counts[1] == counts[2] and counts[0] <= 8


@pytest.mark.parametrize("spec, collective, hybrid", [("16xdgx1-v100", "allreduce", False),
                                                      ("4xdgx-a100", "broadcast", False),
                                                      ("3xcpu-host:2", "allgather", False),
                                                      ("dgx1-v100", "allreduce", True)])
def test_plan_round_trips_through_json_and_pickle_with_its_digest(spec, collective, hybrid):
    # A job may plan on one rank and send the plan to the others (as JSON or pickled), each
    # checking the digest: what arrives must be the same plan, whatever was cached on the original.
    topology = get_preset(spec)
    plan = make_plan(topology, collective, hybrid=hybrid)
    plan.route(*plan.devices[:2])  # build the route index, as planning did
    assert "_derived" in plan.__dict__ and "_route_index" in plan.__dict__
    again = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan and again.digest() == plan.digest()
    verify_plan(again, topology)
    shipped = pickle.loads(pickle.dumps(plan))
    assert shipped == plan and shipped.digest() == plan.digest()
    assert "_derived" not in shipped.__dict__ and "_route_index" not in shipped.__dict__


def test_with_figures_changes_only_the_figures():
    topology = get_preset("2xdgx1-v100")
    plan = make_plan(topology, "allreduce")
    faster = plan.with_figures(rate_gbps=plan.rate_gbps * 2)
    assert faster.trees == plan.trees and faster.cross == plan.cross and faster.digest() != plan.digest()
    with pytest.raises(ValueError, match="trees"):
        plan.with_figures(trees=())
