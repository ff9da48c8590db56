"""blinkflow.runtime: the per-process engine a training step waits on (DESIGN §1).

One module per job, in the order a tensor meets them:

* ``api``          public functions (init, allreduce, ..., *_async, poll, synchronize)
* ``arguments``    a call's arguments checked, or the reason this rank refuses them
* ``startup``      init within a deadline: the arrival census, set-up failures told to every rank
* ``state``        what user threads share with the background thread: queue, names in flight
* ``handles``      slots and the integer handles ``synchronize`` waits on
* ``background``   the background thread: every MPI call of the runtime happens there
* ``job``          init-time discovery: hosts, local/cross communicators, topology, plan check
* ``negotiation``  one cycle: the bit-vector fast path, else gather to rank 0 and broadcast
* ``coordinator``  rank 0's table of requests: readiness, validation (mismatch errors), join
* ``response_cache`` responses negotiated before, addressed by bit
* ``fusion``       grouping ready all-reduces into one buffer
* ``executor``     running responses on the backend, completing handles
* ``stall``        naming the ranks that keep the others waiting
* ``liveness``     noticing dead, failed and frozen peers (ULFM errors, the watchdog thread)
* ``side_channel`` a second communicator for notices and heartbeats beside the runtime's
* ``timeline``     the Chrome-trace file
* ``messages``, ``log``  the small shared types and the logger

Importing this package imports nothing heavy; ``api`` (and with it mpi4py) loads on first use.
"""
