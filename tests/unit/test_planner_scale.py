"""The planner at cluster scale (issue 19): work that does not grow with the number of identical
hosts is done once, and start-up does not pay for what only the tools show. Counted, not timed."""
import pytest

from blinkflow.planner import make, make_plan, ring
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
