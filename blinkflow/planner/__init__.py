"""Pure planning: Topology in, Plan out. Imports no MPI, CuPy or TensorFlow (``docs/planner.md``).

The entry point, ``make_plan``, packs spanning trees optimally for every collective (Edmonds'
arborescences for broadcast and reduce, ForestColl's out-trees for all-gather and reduce-scatter,
the better of those and Blink's single-root packing for all-reduce, three phases across hosts),
and ``verify_plan`` checks any plan against a topology.

Modules, one job each:

``make``        ``make_plan``: Topology in, verified Plan out (the public entry point)
``plan``        the ``Plan``: which spanning trees carry which fraction of a buffer
``verify``      the plan verifier every plan passes before it is returned or run
``loads``       the link load model of every plan, and the rate it implies
``network``     the capacitated graph a plan is packed on: one fabric, cut to the allocation
``maxflow``     the one adapter over OR-Tools max-flow
``splitting``   removing switches by edge splitting, keeping every terminal's connectivity
``edmonds``     Edmonds' arborescence packing: the broadcast optimum and a packing reaching it
``forestcoll``  the all-gather / reduce-scatter optimum and its out-trees (ForestColl)
``undirected``  Blink's single-root all-reduce: reduce up, broadcast down one packing
``hybrid``      Blink's heterogeneous channels: NVLink and PCIe trees sharing one buffer
``single``      plans for one fabric of one host
``assemble``    packed parts in, a ``Plan`` out: where every planning path ends
``hosts``       identical hosts planned once, the packing carried to every host of that shape
``nics``        how a host's devices reach the network, and the most they push together
``star``        all-reduce among devices that meet at one switch (a three-phase plan's cross-host groups)
``refinement``  the common refinement of several partitions of [0, 1)
``multihost``   the three-phase all-reduce across hosts (Blink §5)
``crosshost``   broadcast, reduce, all-gather and reduce-scatter across hosts, as composed trees
``ring``        the NCCL-style ring baseline (``ring_gbps``)
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
