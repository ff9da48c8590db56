"""blinkflow.runtime: the per-process engine a training step waits on.

One module per job, in the order a tensor meets them:

* ``api``          the public functions (init, allreduce, ..., *_async, poll, synchronize): a facade
* ``global_state`` this process's runtime as one object: the engine, broken state, automatic names
* ``lifecycle``    init, shutdown and the exit hook
* ``collectives``  the collectives (allreduce, ..., *_async): one table of how arguments become a request; one submit
* ``arguments``    a call's arguments checked, or the reason this rank refuses them
* ``enqueue``      call names; refusals and barriers onto a set's queue; handles, poll and synchronize
* ``barriers``     barrier and join
* ``objects``      pickled object collectives (broadcast_object, allgather_object)
* ``process_sets`` the user's ProcessSet, the registry calls, the loop a set's calls run on
* ``startup``      init within a deadline: the arrival census, set-up failures told to every rank
* ``state``        what user threads share with the background thread: queue, the entries in flight
* ``handles``      slots and the integer handles ``synchronize`` waits on
* ``background``   the engine: the global set's thread, which sets the job up and runs its loop
* ``set_threads``  the other process sets: the registry and one thread per set
* ``set_loop``     one set's cycle: negotiate, fuse, execute, inspect stalls
* ``job``          init-time discovery: hosts, local/cross communicators, topology, plan check
* ``discovery``    every rank's probe (host, local rank, GPU), merged on rank 0
* ``link_probe``   the network between the job's hosts measured, for plans that route by it
* ``plans``        the plans of every collective, agreed by digest
* ``negotiation``  one cycle: the bit-vector fast path, else gather to rank 0 and broadcast
* ``coordinator``  rank 0's table of requests: readiness, validation (mismatch errors), join
* ``response_cache`` responses negotiated before, addressed by bit
* ``fusion``       grouping ready all-reduces into one buffer
* ``executor``     running responses on the backend, completing handles
* ``result_pool``  recycled, pre-faulted host memory for results
* ``stall``        naming the ranks that keep the others waiting
* ``liveness``     noticing dead, failed and frozen peers (ULFM errors, the watchdog thread)
* ``side_channel`` a second communicator for notices and heartbeats beside the runtime's
* ``launcher_hooks`` what a rank tells blinkrun about how the job ends on its host
* ``timeline``     the Chrome-trace file
* ``standalone``   a backend context for tests and benchmarks, made by the job's own set-up
* ``autotune``     online search of the runtime's knobs while a job trains (``BLINKFLOW_AUTOTUNE``)
* ``bayes_opt``    Bayesian optimisation of a noisy score over a box, for the autotuner
* ``fences``       ``add_process_set`` / ``remove_process_set`` called by some ranks only: an error, not a stall
* ``mpi_start``    MPI's own start-up, under a deadline that does not need this interpreter
* ``messages``     the small control messages the background threads exchange
* ``log``          the runtime's logger, lines prefixed with the rank
* ``doorbell``     a ``threading.Event`` for one waiting thread, made of one raw lock

Which thread makes which MPI call: the user's thread during ``init`` (the arrival census and the
wait for set-up, a communicator made from a list of ranks, a process set given as a communicator
translated to ranks); the background thread for the global set (the job's set-up, its
negotiation and collectives, adding and removing process sets and each set's set-up); each
process set's own thread for that set's negotiation, collectives and teardown; the watchdog
thread for heartbeats and notices on the side channel (only under ``MPI_THREAD_MULTIPLE``).

Importing this package, or ``api``, imports neither mpi4py, TensorFlow nor CuPy: MPI starts in ``init``.
"""
