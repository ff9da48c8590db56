"""The rank wrapper's GPU pin and ``blinkrun --check-build``'s device list, from a stand-in for
CUDA's view (no MPI, no CuPy)."""
from blinkflow.topology.visible_devices import GpuIdentity
from blinkflow.launcher.commands.check_build import device_lines, report
from blinkflow.launcher.ranks.gpu_pin import gpu_pin, pin_line
from blinkflow.launcher.job.mpi_impl import MpiImpl, OPEN_MPI
from blinkflow.launcher.job.mpirun_argv import LaunchSpec, build_mpirun_argv

GPUS = [GpuIdentity(f"0000:{0x18 + 0x10 * i:02x}:00.0", f"GPU-{i}", "H100") for i in range(4)]


def local(rank, size, **env):
    return dict(env, OMPI_COMM_WORLD_LOCAL_RANK=str(rank), OMPI_COMM_WORLD_LOCAL_SIZE=str(size))


def test_every_local_rank_gets_the_hosts_devices_and_drives_its_own():
    for k in range(2):
        updates, pin = gpu_pin(local(k, 2), lambda: GPUS)
        assert updates == {"CUDA_VISIBLE_DEVICES": "GPU-0,GPU-1"} and pin.ordinal == k and pin.device == GPUS[k]
    line = pin_line(gpu_pin(local(1, 2), lambda: GPUS)[1], 5, 1, "node7")
    assert line.startswith("blinkrun: rank 5 (local rank 1 on node7) drives CUDA device 1: H100, PCI 0000:28:00.0, "
                           "GPU-1 (local rank 1 of 2); CUDA_VISIBLE_DEVICES=GPU-0,GPU-1")


def test_mig_lists_do_not_ask_cuda_and_opt_out_changes_nothing():
    def no_cuda():
        raise AssertionError("CUDA asked for a MIG list")
    assert gpu_pin(local(1, 2, CUDA_VISIBLE_DEVICES="MIG-a,MIG-b"), no_cuda)[0] == {"CUDA_VISIBLE_DEVICES": "MIG-b"}
    assert gpu_pin(local(0, 2, BLINKFLOW_PIN_GPUS="0"), no_cuda) == ({}, None)


def test_check_build_lists_the_device_of_each_local_rank():
    lines = device_lines({"CUDA_VISIBLE_DEVICES": "3,2,1,0"}, lambda: GPUS[::-1])
    assert lines[:4] == [f"    local rank {k}: CUDA device {k}: H100, PCI {GPUS[3 - k].bus_id}, GPU-{3 - k} "
                         f"(local rank {k} of 4)" for k in range(4)]
    assert lines[4] == "    every local rank gets CUDA_VISIBLE_DEVICES=GPU-3,GPU-2,GPU-1,GPU-0"
    assert device_lines({}, lambda: None) == ["    none: GPUs not pinned: CUDA cannot be asked here (no CuPy)"]
    assert report([], lambda: ["    local rank 0: x"]).endswith("Devices the local ranks will drive:\n"
                                                                 "    local rank 0: x\n")


def test_verbose_reaches_the_rank_wrapper():
    impl = MpiImpl(OPEN_MPI, "Open MPI", "5.0.11", "/x/mpirun")
    argv = build_mpirun_argv(impl, LaunchSpec(np=2, command=("python", "t.py"), verbose=True), python="py",
                             environ={}, is_root=False, local_cores=4)
    assert argv[-5:] == ["blinkflow.launcher.ranks.rank_exec", "--verbose", "--", "python", "t.py"]
