"""Virtual-time execution of schedules on a topology, and NCCL-style baselines
(``docs/schedule-and-sim.md``).

``simulate(schedule, topology, plan=None)`` runs one lowered schedule; ``simulate_plan`` lowers
a plan at a byte size with the chunk size tuned by Blink's MIAD rule.
"""
from .api import largest_job, simulate, simulate_plan
from .engine import SimResult, bus_factor

__all__ = ["SimResult", "bus_factor", "largest_job", "simulate", "simulate_plan"]
