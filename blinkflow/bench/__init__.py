"""``python -m blinkflow.bench SUITE``: the benchmarks, shipped so they run on any machine
blinkflow is installed on (docs/benchmarks.md). Each suite is a click command in its own module.

Modules, one job each:

``cli``                  the benchmark command line; each suite registers a click command
``allreduce``            ``allreduce``: blinkflow's all-reduce against MPI_Allreduce, in the same processes
``separate``             ``separate``: blinkflow's all-reduce and MPI's, each in its own job, in turn
``timing_worker``        one side of ``separate`` and ``cross-host``, run under mpirun as a plain script
``cross_host``           ``cross-host``: blinkflow's all-reduce and MPI's across hosts, limited links
``cluster``              a cluster of hosts on one machine (network namespaces, sshd), for
                         ``cross-host`` and the multi-host tests
``tcp_rate``             one link's rate, measured by a TCP stream between two hosts of a cluster
``latency``              ``latency``: one small all-reduce's latency, hop by hop, beside MPI's and TF's floor
``latency_worker``       one job of ``latency``, run under mpirun as a plain script
``call_counts``          Python and C calls per all-reduce: the runtime's per-call cost, counted
``control``              ``control``: one control message's round trip, shared-memory rings against MPI
``runner_actions``       ``runner-actions``: the cuda runner's host cost per action
``gpu``                  ``gpu``: the cuda backend against its peers on this machine
``gpu_loopback``         ``gpu --loopback``: the device executor's loopback mode on one GPU
``loopback_executor``    that mode: every virtual rank of a schedule in one launch on one GPU
``hand_schedules``       schedules built by hand without the planner (chains, one-hop), for ``gpu`` and
                         tests
``autotune``             ``autotune``: the autotuner's settings against the defaults, in alternating jobs
``tf_peers``             ``tf-peers``: a training step under blinkflow and under MultiWorkerMirroredStrategy
``tf_step``              one side of ``tf-peers``: the synthetic benchmark's training step
``overlap_timeline``     ``overlap-timeline``: a training step's all-reduces against the compute they
                         overlap
``elastic_gain``         ``elastic-gain``: from a host's appearance to the first step with the new rank
``elastic_gain_worker``  one rank of ``elastic-gain``
``elastic_loss``         ``elastic-loss``: from a rank's death to the first step on the survivors
``paper``                ``paper``: Blink's DGX-1 experiment, re-run in the simulator
``scale``                ``scale``: three phases against NCCL's ring and tree across many hosts, simulated
``planner``              ``planner``: how long ``make_plan`` takes, per preset and size
``planner_scale``        ``planner --scale``: planning time against cluster size
"""
