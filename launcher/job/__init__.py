"""A job under ``mpirun``: its hosts, which MPI launches it, ``mpirun``'s arguments and the
environment the ranks get, then the job supervised to one exit status.

``hosts``           a job's hosts: ``-H``, a hostfile, or a discovery script's lines (one parser)
``mpi_impl``        which MPI launches the job (Open MPI or an MPICH family member)
``mpirun_argv``     the ``mpirun`` argument list, a pure function of its inputs
``env_forwarding``  which environment variables reach the ranks on every host
``supervise``       runs mpirun, relays its output, turns the ranks' reports into an exit status
``verdict``         which rank failed first, from what the wrappers said
``daemon_loss``     which host's MPI daemon mpirun says it lost
``reclaim``         reclaiming what dead jobs left on this machine
"""
