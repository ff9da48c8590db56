"""Virtual-time execution of schedules on a topology, and NCCL-style baselines
(``docs/schedule-and-sim.md``).

``simulate(schedule, topology, plan=None)`` runs one lowered schedule; ``simulate_plan`` lowers
a plan at a byte size with the chunk size tuned by Blink's MIAD rule.

Modules, one job each:

``api``                the entry points: ``simulate`` a schedule, ``simulate_plan`` a plan at a byte size
``engine``             discrete-event execution of a ``Schedule`` in virtual time on a ``Topology``
``routes``             which physical links a logical transfer occupies, and their latencies
``chunking``           chunk-size tuning by Blink's MIAD rule
``baselines``          NCCL's algorithms lowered to the same IR, run in the same simulator
``rings``              the rings NCCL would build on a set of GPUs
``extrapolate``        NCCL's ring across many identical hosts, read off fewer hosts
``compare``            blinkflow's plan against NCCL's algorithm for one call (``blinkrun simulate``)
``policy_prediction``  what the call-shape policy would run, and each algorithm's predicted time
"""
from .api import largest_job, simulate, simulate_plan
from .engine import SimResult, bus_factor

__all__ = ["SimResult", "bus_factor", "largest_job", "simulate", "simulate_plan"]
