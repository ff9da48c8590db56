"""What every executor runs: the schedule IR, its lowering from a Plan, and its checker.

A :class:`~blinkflow.planner.plan.Plan` says which trees carry which fraction of a buffer; a
:class:`Schedule` says, per device, which chunk to send, receive, reduce and forward, in what
order, on which channel (Blink MLSys 2020, §4-5). Modules, one job each:

``ir``         the plain-dataclass IR (``Step``, ``Schedule``), its rules and JSON round-trip
``builder``    derives ``deps``, FIFO transfer matching and rounds while a lowering adds steps
``emit``       chunk-pipelined reduce-up / broadcast-down of one range over one tree
``lower``      ``lower(plan, nelems, chunk_elems)``: every collective, and the one three-phase
               all-reduce across hosts
``symbolic``   ``check(schedule)``: proves the postcondition by symbolic execution (MSCCL)
``lanes``      ``split_lanes(schedule, lanes)``: every channel split into lanes (blocks per tree)
``device_geometry``  the device executor's threads, loads in flight and lanes (Little's law)

Pure: imports no MPI, CuPy or TensorFlow.
"""
from .ir import RECEIVING_OPS, REDUCING_OPS, SENDING_OPS, STEP_OPS, Schedule, Step

__all__ = ["RECEIVING_OPS", "REDUCING_OPS", "SENDING_OPS", "STEP_OPS", "Schedule", "Step"]
