"""``blinkrun``'s commands: launching a job, and the tools that inspect a machine, a topology or a
plan without launching anything (each imported only when its command runs).

``run``          ``blinkrun -np N ... COMMAND``: launch a job
``topo``         ``blinkrun topo``: show a topology
``plan``         ``blinkrun plan``: pack one collective's trees and show them
``plan_draw``    ``blinkrun plan --png``: the trees drawn on the topology
``simulate``     ``blinkrun simulate``: blinkflow's plan against NCCL's, simulated
``check_build``  ``blinkrun --check-build``: what this installation can use
``cuda_extra``   which GPU extra of blinkflow fits this machine's CUDA
"""
