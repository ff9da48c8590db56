"""``blinkrun``: the launcher (click). Installed as ``blinkflow.launcher``; this folder stays at the
repository's top level as the design card asks (setup.cfg maps it).

Modules and subpackages, one job each:

``cli``                  entry point of the ``blinkrun`` console script
``one_line``             a click command whose every usage error is one line and exit status 2
``run_cmd``              ``blinkrun -np N ... COMMAND``: launch a job
``flag_table``           the one table of ``blinkrun``'s flags: spellings (``horovodrun``'s too),
                         handling, what each feeds, help lines; the other flag lists are views of it
``flag_docs``            the documented flag tables (docs/launching.md, docs/configuration.md),
                         written from the flag table
``flags``                the ranks' ``BLINKFLOW_*`` variables from the setting flags
``horovod_config_file``  ``--config-file F``: Horovod's YAML parameter file, read as flags
``hosts``                a job's hosts: ``-H``, a hostfile, or a discovery script's lines
``mpi_impl``             which MPI launches the job (Open MPI or an MPICH family member)
``mpirun_argv``          the ``mpirun`` argument list, a pure function of its inputs
``env_forwarding``       which environment variables reach the ranks on every host
``gpu_pin``              pinning a rank to its GPU before CUDA starts in it
``rank_exec``            the wrapper ``blinkrun`` starts on every rank
``pyhook``               subpackage: the ``sitecustomize`` put first on a Python rank's path
``events``               the one-line messages a rank's wrapper sends ``blinkrun``
``supervise``            runs mpirun, relays its output, turns the ranks' reports into an exit status
``verdict``              which rank failed first, from what the wrappers said
``daemon_loss``          which host's MPI daemon mpirun says it lost
``reclaim``              reclaiming what dead jobs left on this machine
``elastic_flags``        an elastic job's bounds (``ElasticSpec``) from the elastic flags
``elastic_launch``       what an elastic job changes in the launch
``elastic_driver``       blinkrun's side of an elastic job: where ranks are, free slots, spawns
``elastic_discovery``    host discovery for elastic jobs (``--host-discovery-script``, blacklist)
``check_build``          ``blinkrun --check-build``: what this installation can use
``cuda_extra``           which GPU extra of blinkflow fits this machine's CUDA
``topo_cmd``             ``blinkrun topo``: show a topology
``plan_cmd``             ``blinkrun plan``: pack one collective's trees and show them
``plan_draw``            ``blinkrun plan --png``: the trees drawn on the topology
``simulate_cmd``         ``blinkrun simulate``: blinkflow's plan against NCCL's, simulated
"""
