"""Run by test_plan_agreement.py: one rank's view differs at init, and every rank must refuse
to start, naming the ranks, instead of running different schedules.

topology  rank 1 sees one link of the job's topology at half its speed (as if its topology file
          were another), so its plans differ too: "different topologies"
plan      rank 1's planner returns another all-reduce plan (as a different planner version
          would): "different plans for allreduce", at init
allgather as ``plan``, for the all-gather, planned and agreed when it first runs: the error
          reaches every rank at that call; the next collective still works (no hang)
broadcast likewise, for a broadcast from a root first used after init
"""
import dataclasses
import sys

import numpy as np
from mpi4py import MPI

import blinkflow as bf
from blinkflow.runtime import job as job_module
from blinkflow.runtime import plans as plans_module

MODE = sys.argv[1]
RANK = MPI.COMM_WORLD.Get_rank()


def skew_topology():
    discover_job = job_module.discover_job

    def skewed(comm, config, **kwargs):
        found = discover_job(comm, config, **kwargs)
        topology = found.topology
        links = list(topology.links)
        links[0] = dataclasses.replace(links[0], gbps=links[0].gbps / 2)
        return dataclasses.replace(found, topology=dataclasses.replace(topology, links=tuple(links)))

    job_module.discover_job = skewed


def skew_plan(collective, skewed_root=None):
    make = plans_module.PlanBook.agree

    def agree(self, keys):
        real = self.make

        def other(topology, what, devices, root=None):
            plan = real(topology, what, devices=devices, root=root)
            if what == collective and (skewed_root is None or root == skewed_root) and plan.trees:
                tree = plan.trees[0]
                plan = dataclasses.replace(plan, trees=(dataclasses.replace(tree, fraction=tree.fraction / 2),)
                                           + plan.trees[1:])
            return plan

        self.make = other
        try:
            make(self, keys)
        finally:
            self.make = real

    plans_module.PlanBook.agree = agree


if RANK == 1:
    if MODE == "topology":
        skew_topology()
    elif MODE == "plan":
        skew_plan("allreduce")
    elif MODE == "allgather":
        skew_plan("allgather")
    else:
        skew_plan("broadcast", skewed_root=MPI.COMM_WORLD.Get_size() - 1)  # device = rank on a CPU job

try:
    bf.init()
except bf.PlanError as e:
    print(f"PLANERROR rank {RANK}: {e}", flush=True)
    sys.exit(0)
if MODE in ("topology", "plan"):
    print(f"NOERROR rank {RANK}", flush=True)
    sys.exit(0)
last = bf.size() - 1
try:
    if MODE == "allgather":
        bf.allgather(np.arange(4.0), name="first.allgather")
    else:
        bf.broadcast(np.arange(4.0), root_rank=last, name="late.root")
except bf.BlinkflowError as e:
    print(f"PLANERROR rank {RANK}: {type(e).__name__}: {e}", flush=True)
else:
    print(f"NOERROR rank {RANK}", flush=True)
total = bf.allreduce(np.ones(3), op=bf.Sum, name="after")  # the runtime goes on
print(f"AFTER rank {RANK} {total.tolist() == [float(bf.size())] * 3}", flush=True)
bf.shutdown()
