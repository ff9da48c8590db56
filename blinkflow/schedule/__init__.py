"""What every executor runs: the schedule IR, its lowering from a Plan, and its checker.

A :class:`~blinkflow.planner.plan.Plan` says which trees carry which fraction of a buffer; a
:class:`Schedule` says, per device, which chunk to send, receive, reduce and forward, in what
order, on which channel (Blink MLSys 2020, §4-5).

Modules, one job each:

``ir``               the plain-dataclass IR (``Step``, ``Schedule``), its rules and JSON round-trip
``builder``          derives ``deps``, FIFO transfer matching and rounds while a lowering adds steps
``emit``             chunk-pipelined reduce-up / broadcast-down of one range over one tree
``lower``            ``lower(plan, nelems, chunk_elems)``: every collective, and the three-phase all-reduce
``intervals``        a piecewise-constant map over ``[0, n)``: the element ranges of a buffer
``views``            a fast path's view of a lowered all-reduce: a host's one-hop stars, the cross-host part
``symbolic``         ``check(schedule)``: proves the postcondition by symbolic execution (MSCCL)
``deadlock``         proves a call shape's device tables cannot deadlock, by one greedy run
``proofs``           proofs before a schedule first runs, remembered by digest and shared between processes
``cache``            lowered schedules and compiled programs, once per call shape, validated
``policy``           the call-shape policy: which registered algorithm and chunk run a call
``step_costs``       what a step costs each algorithm besides its bytes (the simulator's figures)
``program``          one device's part of a schedule compiled into actions
``runner``           ``run_program``: the one runner every backend executes schedules through
``transport``        what the runner needs from a backend: a ``Transport``
``lanes``            ``split_lanes(schedule, lanes)``: every channel split into lanes (blocks per tree)
``device_geometry``  the device executor's threads, loads in flight and lanes (Little's law)
``device_tables``    per-block step tables: a rank's program as the device executor runs it

Pure: imports no MPI, CuPy or TensorFlow.
"""
from .ir import RECEIVING_OPS, REDUCING_OPS, SENDING_OPS, STEP_OPS, Schedule, Step

__all__ = ["RECEIVING_OPS", "REDUCING_OPS", "SENDING_OPS", "STEP_OPS", "Schedule", "Step"]
