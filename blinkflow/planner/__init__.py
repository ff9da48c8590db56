"""Pure planning: Topology in, Plan out. Imports no MPI, CuPy or TensorFlow (``docs/planner.md``).

``make_plan`` packs spanning trees optimally for every collective (Edmonds' arborescences for
broadcast and reduce, ForestColl's out-trees for all-gather and reduce-scatter, the better of
those and Blink's single-root packing for all-reduce, three phases across hosts), and
``verify_plan`` checks any plan against a topology.
"""
from .plan import COLLECTIVES, CrossGroup, Plan, Route, Tree, split_counts


def __getattr__(name):
    # The algorithms import OR-Tools; load them on first use so that reading a Plan (the
    # runtime, the schedule lowering) stays light.
    if name == "make_plan":
        from .make import make_plan
        return make_plan
    if name == "verify_plan":
        from .verify import verify_plan
        return verify_plan
    if name == "link_loads":
        from .loads import link_loads
        return link_loads
    if name in ("ring_rate", "ring_gbps"):
        from .ring import ring_gbps
        return ring_gbps
    raise AttributeError(f"module 'blinkflow.planner' has no attribute {name!r}")


__all__ = ["COLLECTIVES", "CrossGroup", "Plan", "Route", "Tree", "split_counts",
           "make_plan", "verify_plan", "link_loads", "ring_rate", "ring_gbps"]
