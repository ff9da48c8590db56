"""One rank of test_measured_links_three_hosts.py, on bfa, bfb and bfc (one rank each).

With ``BOASTING_RANK=k`` rank k's measurements claim every pair ten times faster than it saw
(a clock or a wait that ran short on one end): agreement must still give every rank the same
figures, the honest ones. Prints the job's topology digest and the load each host pair carries
in the agreed all-reduce plan, then checks all-reduces against numpy.
"""
import json
import os

import numpy as np

from blinkflow.runtime import link_probe

RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", "-1"))
if RANK == int(os.environ.get("BOASTING_RANK", "-2")):
    honest_meet = link_probe._meet

    def boasting_meet(*args):
        return {pair: 10 * rate for pair, rate in honest_meet(*args).items()}

    link_probe._meet = boasting_meet


def main():
    import blinkflow as bf
    from blinkflow.planner.loads import link_loads
    from blinkflow.runtime import api as rt
    from plan_loads import host_pair_loads   # tests/ is on PYTHONPATH (harness.with_tests_on_path)

    bf.init()
    r, n = bf.rank(), bf.size()
    job = rt.RUNTIME.engine.job
    topology = job.topology
    plan = job.plans.get("allreduce")
    links = {f"{topology.node(l.src).host}->{topology.node(l.dst).host}": l.gbps
             for l in topology.links_of_kind("net")}
    loads = {f"{a}->{b}": v for (a, b), v in host_pair_loads(topology, link_loads(plan)).items()}
    print("PLAN " + json.dumps({"rank": r, "digest": topology.digest(), "name": topology.name,
                                "three_phase": plan.is_three_phase, "links": links, "loads": loads}), flush=True)
    for dtype in ("float32", "int64"):
        inputs = [np.random.default_rng(7 + q).integers(-1000, 1000, 300_001).astype(dtype) for q in range(n)]
        got = bf.allreduce(inputs[r], op=bf.Sum, name=f"ar.{dtype}")
        assert np.array_equal(got, np.sum(inputs, axis=0).astype(dtype)), f"allreduce {dtype} rank {r}"
    print(f"VALUES OK {r}", flush=True)
    bf.shutdown()


if __name__ == "__main__":
    main()
