"""The one call-shape policy: which algorithm and chunk each call gets, from agreed inputs."""
import dataclasses
import pathlib
import re

import pytest

from blinkflow.backends.base import Layout
from blinkflow.config import Config
from blinkflow.errors import ConfigError
from blinkflow.schedule import policy
from blinkflow.schedule.policy import Capabilities, choose

ONE_HOST = Layout(0, (0, 0, 0, 0), (0, 1, 2, 3))
TWO_HOSTS = Layout(0, (0, 0, 1, 1), (0, 1, 2, 3))
CPU = Capabilities("cpu", single_copy=True, l2_bytes=2 << 20)
MIB = 1 << 20


def test_across_hosts_the_cpu_runner_stages_a_packed_allreduce_in_larger_stages():
    # A stage's end drains the pipeline over the network (policy.CPU_CROSS_HOST_STAGE_BYTES says
    # what it cost): a job across hosts stages 64 MiB, one on one host 8 MiB.
    packed = dataclasses.replace(CPU, single_copy=False)
    across = choose("allreduce", 256 * MIB, 4, TWO_HOSTS, Config(), packed)
    assert across.stage_bytes == policy.CPU_CROSS_HOST_STAGE_BYTES == 64 * MIB
    assert across.stage_elems(16 * MIB, 4) == 16 * MIB and across.stage_elems(64 * MIB, 4) == 16 * MIB
    assert choose("allreduce", 256 * MIB, 4, ONE_HOST, Config(), packed).stage_bytes == 8 * MIB


def test_cpu_runner_chunks_and_reduce_block():
    c = choose("broadcast", 64 * MIB, 4, ONE_HOST, Config(), CPU)
    assert (c.algorithm, c.chunk_bytes, c.block_bytes) == ("runner", 4 * MIB, 1 * MIB)
    assert c.chunk_elems(4) == MIB and c.phase == "ALGORITHM_RUNNER"


def test_the_cpu_runner_stages_a_packed_allreduce_in_whole_chunks_and_its_chunk_needs_no_call():
    c = choose("allreduce", 64 * MIB, 4, ONE_HOST, Config(), dataclasses.replace(CPU, single_copy=False))
    assert c.stage_bytes == policy.CPU_STAGE_BYTES == 8 * MIB
    assert c.stage_elems(2 * MIB, 4) == 2 * MIB          # 8 MiB of float32: one stage
    assert c.stage_elems(2 * MIB + 1, 4) == 2 * MIB      # two chunks of 1 Mi elements
    assert c.stage_elems(5 * MIB, 2) == 4 * MIB          # two whole chunks of 2 Mi float16 within 8 MiB
    small = choose("allreduce", 64 * MIB, 4, ONE_HOST, Config(chunk_bytes=3 * MIB), dataclasses.replace(CPU, single_copy=False))
    assert small.stage_elems(10 * MIB, 4) == 2 * small.chunk_elems(4)   # two chunks fit 8 MiB, three do not
    big = choose("allreduce", 64 * MIB, 4, ONE_HOST, Config(chunk_bytes=16 * MIB), dataclasses.replace(CPU, single_copy=False))
    assert big.stage_elems(10 * MIB, 4) == big.chunk_elems(4)   # at least one chunk
    assert choose("allreduce", 64 * MIB, 4, ONE_HOST, Config(), CPU).stage_elems(5, 4) == 5   # the single copy: none
    for config in (Config(), Config(chunk_bytes=4096), None):   # the runner's chunk, whatever the call
        for nbytes in (4, 64 * MIB):
            runner = choose("broadcast", nbytes, 4, ONE_HOST, config, CPU)
            assert runner.chunk_bytes == policy.cpu_runner_chunk_bytes(config), (config, nbytes)


def test_single_copy_takes_large_allreduces_of_large_pieces():
    assert choose("allreduce", 16 * MIB * 4, 4, ONE_HOST, Config(), CPU).algorithm == "single_copy"
    assert choose("allreduce", 16 * MIB * 4, 4, ONE_HOST, Config(), CPU).chunk_bytes == 512 << 10  # 2 MiB of L2
    assert choose("allreduce", 16 * MIB - 1, 4, ONE_HOST, Config(), CPU).algorithm == "runner"  # 4 MiB per rank
    assert choose("allreduce", 64 * MIB, 4, ONE_HOST, Config(), CPU, npieces=2000).algorithm == "runner"
    assert choose("allreduce", 64 * MIB, 4, ONE_HOST, Config(), dataclasses.replace(CPU, single_copy=False)).algorithm == "runner"


def test_chunk_bytes_setting_overrides_every_chunk():
    config = Config(chunk_bytes=4096)
    for collective, n in (("broadcast", 10), ("allreduce", 64 * MIB)):
        assert choose(collective, n, 4, ONE_HOST, config, CPU).chunk_bytes == 4096
    assert choose("allreduce", 64 * MIB, 4, ONE_HOST, config, Capabilities("cuda")).chunk_bytes == 4096


@pytest.mark.parametrize("nbytes,chunk", [(0, MIB), (4 * MIB, MIB), (32 * MIB, 2 * MIB), (64 * MIB, 4 * MIB),
                                          (256 * MIB, 16 * MIB), (4096 * MIB, 16 * MIB)])
def test_cuda_runner_chunk_grows_with_the_buffer(nbytes, chunk):
    assert choose("allreduce", nbytes, 4, ONE_HOST, Config(), Capabilities("cuda")).chunk_bytes == chunk


def test_device_executor_only_when_asked_for():
    """``auto`` keeps the runner on GPUs until the kernel has run on one; ``device`` picks it."""
    gpu = Capabilities("cuda", device_executor=True)
    assert choose("allreduce", 256 * MIB, 4, ONE_HOST, Config(), gpu).algorithm == "runner"
    c = choose("allreduce", 256 * MIB, 4, ONE_HOST, Config(algorithm="device"), gpu)
    assert (c.algorithm, c.window) == ("device", policy.DEVICE_WINDOW)
    assert policy.DEVICE_MIN_CHUNK_BYTES <= c.chunk_bytes <= policy.DEVICE_MAX_CHUNK_BYTES
    assert choose("allgather", 100, 4, TWO_HOSTS, Config(algorithm="device"), gpu).algorithm == "device"
    assert choose("allreduce", 256 * MIB, 4, ONE_HOST, Config(algorithm="runner"), gpu).algorithm == "runner"


def test_an_algorithm_that_cannot_run_the_call_is_a_config_error():
    with pytest.raises(ConfigError, match="no device executor"):
        choose("allreduce", 100, 4, ONE_HOST, Config(algorithm="device"), Capabilities("cuda"))
    with pytest.raises(ConfigError, match="single_copy runs all-reduces"):
        choose("broadcast", 100, 4, ONE_HOST, Config(algorithm="single_copy"), CPU)


def test_a_setting_for_the_other_backend_leaves_a_call_to_auto():
    """A job moves numpy and cupy tensors alike: forcing the GPU's algorithm leaves the cpu's calls alone."""
    assert choose("allreduce", 100, 4, ONE_HOST, Config(algorithm="device"), CPU) == \
        choose("allreduce", 100, 4, ONE_HOST, Config(), CPU)
    assert choose("allreduce", 64 * MIB, 4, ONE_HOST, Config(algorithm="single_copy"), Capabilities("cuda")) == \
        choose("allreduce", 64 * MIB, 4, ONE_HOST, Config(), Capabilities("cuda"))
    with pytest.raises(ConfigError, match="BLINKFLOW_ALGORITHM must be one of"):
        Config(algorithm="fast")


def test_a_small_cpu_allreduce_of_an_mpi_dtype_is_mpis_own():
    """Latency bound: up to MPI_ALLREDUCE_MAX_BYTES of a dtype MPI reduces, MPI's all-reduce,
    above it (and for float16, bfloat16, bool, unknown dtypes, other collectives) the trees."""
    top = policy.MPI_ALLREDUCE_MAX_BYTES
    for dtype in ("float32", "float64", "int8", "int64", "uint32"):
        for layout in (ONE_HOST, TWO_HOSTS):
            c = choose("allreduce", top, 4, layout, Config(), CPU, dtype=dtype)
            assert (c.algorithm, c.chunk_bytes, c.phase) == ("mpi", 0, "ALGORITHM_MPI"), (dtype, layout)
            assert "latency bound" in c.why
    assert choose("allreduce", 4, 4, ONE_HOST, Config(), CPU, dtype="float32").algorithm == "mpi"
    assert choose("allreduce", top + 1, 1, ONE_HOST, Config(), CPU, dtype="int8").algorithm == "runner"
    for dtype in ("float16", "bfloat16", "bool", None):
        assert choose("allreduce", 4, 2, ONE_HOST, Config(), CPU, dtype=dtype).algorithm == "runner", dtype
    for collective in ("broadcast", "allgather", "reducescatter"):
        assert choose(collective, 4, 4, ONE_HOST, Config(), CPU, dtype="float32").algorithm == "runner"
    assert choose("allreduce", 4, 4, ONE_HOST, Config(), Capabilities("cuda"), dtype="float32").algorithm == "runner"
    assert choose("allreduce", 4, 4, ONE_HOST, Config(algorithm="runner"), CPU, dtype="float32").algorithm == "runner"


def test_the_mpi_setting_forces_mpi_where_it_can_run_and_leaves_the_rest_to_auto():
    forced = Config(algorithm="mpi")
    c = choose("allreduce", 64 * MIB, 4, ONE_HOST, forced, CPU, dtype="float32")
    assert (c.algorithm, c.why) == ("mpi", "BLINKFLOW_ALGORITHM=mpi")
    for collective, dtype in (("allreduce", "float16"), ("broadcast", "float32"), ("allreduce", None)):
        assert choose(collective, 64 * MIB, 4, ONE_HOST, forced, CPU, dtype=dtype) == \
            choose(collective, 64 * MIB, 4, ONE_HOST, Config(), CPU, dtype=dtype), (collective, dtype)
    assert choose("allreduce", 4, 4, ONE_HOST, forced, Capabilities("cuda"), dtype="float32") == \
        choose("allreduce", 4, 4, ONE_HOST, Config(), Capabilities("cuda"), dtype="float32")


def test_alltoall_is_its_own_algorithm():
    assert choose("alltoall", 100, 4, ONE_HOST, Config(), CPU).algorithm == "alltoall"


def test_capabilities_digest_covers_the_layout_but_not_the_l2():
    assert CPU.digest(ONE_HOST) != CPU.digest(TWO_HOSTS)
    assert CPU.digest(ONE_HOST) == dataclasses.replace(CPU, l2_bytes=1 << 20).digest(ONE_HOST)
    assert CPU.digest(ONE_HOST) != dataclasses.replace(CPU, single_copy=False).digest(ONE_HOST)


def test_one_place_holds_the_chunk_rules():
    """No backend keeps a chunk constant or rule of its own: they all live in the policy."""
    root = pathlib.Path(policy.__file__).resolve().parents[1] / "backends"
    pattern = re.compile(r"^(DEFAULT_CHUNK_BYTES|MIN_SHARD_BYTES|MIN_PIECE_BYTES|MAX_CHUNK_BYTES|CHUNKS_PER_BUFFER)\s*="
                         r"|def (auto_chunk_bytes|chunk_bytes_for|chunk_elems)", re.M)
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_adasum_takes_its_own_algorithm_whatever_the_setting():
    """Adasum is not elementwise: no tree runs it, on either backend, whatever BLINKFLOW_ALGORITHM says."""
    from blinkflow.ops import ReduceOp

    for caps in (CPU, Capabilities("cuda", device_executor=True)):
        for config in (Config(), Config(algorithm="device"), Config(algorithm="single_copy")):
            c = choose("allreduce", 64 * MIB, 4, ONE_HOST, config, caps, op=ReduceOp.ADASUM)
            assert (c.algorithm, c.phase) == ("adasum", "ALGORITHM_ADASUM")
    assert choose("allreduce", 64 * MIB, 4, ONE_HOST, Config(), CPU, op=ReduceOp.SUM).algorithm == "single_copy"
    with pytest.raises(ConfigError, match="Adasum is an all-reduce"):
        choose("reducescatter", 100, 4, ONE_HOST, Config(), CPU, op=ReduceOp.ADASUM)


def test_the_cuda_runner_chunk_fits_the_arena_inside_the_policy():
    """The chunk the policy names is the chunk the cuda runner runs: the arena cap is the policy's."""
    def chunk(hosts, ntrees, chunk_bytes, itemsize, nbytes, arena=256 * MIB):
        layout = Layout(0, tuple(h for h, ranks in enumerate(hosts) for _ in ranks), tuple(range(sum(map(len, hosts)))))
        caps = Capabilities("cuda", arena_bytes=arena)
        choice = choose("allreduce", nbytes, itemsize, layout, Config(chunk_bytes=chunk_bytes), caps, ntrees=ntrees)
        assert choice.algorithm == "runner"
        return choice.chunk_elems(itemsize)

    one_each = [(0,), (1,)]  # two hosts of one rank: slots of 256 MiB / (1 * 2 * 4) = 32 MiB
    assert chunk(one_each, 2, 0, 4, 256 * MIB) == 16 * MIB // 4  # the policy's, at its largest
    assert chunk(one_each, 2, 0, 4, 64 * MIB) == 4 * MIB // 4
    assert chunk(one_each, 2, 4096, 4, 256 * MIB) == 1024  # configured wins
    # Two local senders and three trees: slots of 256 MiB / (2 * 3 * 4), under 16 MiB, cap the chunk.
    assert chunk([(0, 1)], 3, 0, 4, 256 * MIB) == (256 * MIB // 24) // 256 * 256 // 4
    # Eight local senders (a host of 8 beside one of 4) and six trees: the largest host caps it, everywhere.
    assert chunk([tuple(range(8)), tuple(range(8, 12))], 6, 0, 2, 256 * MIB) == (256 * MIB // 192) // 256 * 256 // 2
    # Eight GPUs of one host, eight trees (hgx-h100): 1 MiB slots, so 1 MiB chunks, not the 16 MiB a
    # sixteenth of 256 MiB would give.
    assert chunk([tuple(range(8))], 8, 0, 4, 256 * MIB) == MIB // 4
    assert chunk([(0, 1)], 1, 0, 4, 256 * MIB, arena=64 << 10) == (64 << 10) // 8 // 4  # a small arena
    assert Capabilities("cuda").digest(ONE_HOST) != Capabilities("cuda", arena_bytes=MIB).digest(ONE_HOST)


def test_nccl_where_the_plans_trees_do_not_beat_its_rings():
    nccl = Capabilities("cuda", nccl=True)
    equal = policy.PlanRates(257.14, 257.14)
    better = policy.PlanRates(50.0, 6.67)
    c = choose("allreduce", 256 * MIB, 4, ONE_HOST, Config(), nccl, rates=equal)
    assert c.algorithm == "nccl" and "do not beat" in c.why
    c = choose("allreduce", 256 * MIB, 4, ONE_HOST, Config(), nccl, rates=better)
    assert c.algorithm == "runner" and "(50.0 GB/s) beat NCCL's rings (6.7 GB/s)" in c.why
    assert choose("allreduce", 256 * MIB, 4, ONE_HOST, Config(), Capabilities("cuda"), rates=equal).algorithm == "runner"
    assert choose("allreduce", 256 * MIB, 4, ONE_HOST, Config(), nccl).algorithm == "runner"  # rates unknown
    assert choose("broadcast", 256 * MIB, 4, ONE_HOST, Config(), nccl, rates=equal).algorithm == "runner"
    assert choose("allreduce", 256 * MIB, 4, ONE_HOST, Config(), CPU, rates=equal).algorithm == "single_copy"
    # Asked for: where NCCL cannot run, a typed error; other collectives keep the policy's choice.
    assert choose("allreduce", MIB, 4, ONE_HOST, Config(algorithm="nccl"), nccl, rates=better).algorithm == "nccl"
    assert choose("allreduce", MIB, 4, ONE_HOST, Config(algorithm="nccl"), nccl).algorithm == "nccl"  # rates unknown
    assert choose("broadcast", MIB, 4, ONE_HOST, Config(algorithm="nccl"), nccl, rates=better).algorithm == "runner"
    with pytest.raises(ConfigError, match="no NCCL here"):
        choose("allreduce", MIB, 4, ONE_HOST, Config(algorithm="nccl"), Capabilities("cuda"), rates=equal)
    assert choose("allreduce", MIB, 4, ONE_HOST, Config(algorithm="nccl"), CPU).algorithm == "runner"


def test_the_single_copy_is_chosen_only_where_the_calls_trees_let_it_run():
    """The cpu backend hands the policy whether the call's trees let the single copy run (a
    lowering, so asked only where the single copy would be chosen); where they do not, the call
    takes what it would without the single copy, and a forced single copy is a ConfigError."""
    asked = []

    def trees(answer):
        return lambda: asked.append(answer) or answer

    big = 16 * MIB * 4
    assert choose("allreduce", big, 4, ONE_HOST, Config(), CPU, trees_allow_single_copy=trees(True)).algorithm \
        == "single_copy"
    refused = choose("allreduce", big, 4, ONE_HOST, Config(), CPU, trees_allow_single_copy=trees(False))
    assert refused == choose("allreduce", big, 4, ONE_HOST, Config(), dataclasses.replace(CPU, single_copy=False))
    assert choose("allreduce", 1024, 4, ONE_HOST, Config(), CPU, dtype="float32",
                  trees_allow_single_copy=trees(True)).algorithm \
        == "mpi"
    assert asked == [True, False]   # never for a call the single copy would not take
    with pytest.raises(ConfigError, match="single_copy runs all-reduces"):
        choose("allreduce", big, 4, ONE_HOST, Config(algorithm="single_copy"), CPU, trees_allow_single_copy=trees(False))


@pytest.mark.parametrize("ntrees", [1, 3, 16])
@pytest.mark.parametrize("config", [Config(), Config(chunk_bytes=4 * MIB)])
def test_the_cuda_arenas_smallest_slot_is_the_runners_chunk_for_the_smallest_call(config, ntrees):
    """The receive arena is sized by the policy's rule, which is the chunk the policy gives the
    runner for the smallest all-reduce at that many trees: every runner chunk then fits a slot."""
    caps = Capabilities("cuda", arena_bytes=64 * MIB, runner_slots=2)
    smallest = choose("allreduce", 0, 4, TWO_HOSTS, config, caps, ntrees=ntrees)
    assert smallest.algorithm == "runner"
    assert policy.cuda_arena_slot_bytes(TWO_HOSTS, config, caps, ntrees) == smallest.chunk_bytes


@pytest.mark.parametrize("algorithm", ["nccl", "device"])
def test_the_cuda_arena_is_sized_under_any_algorithm_setting(algorithm):
    """Under BLINKFLOW_ALGORITHM=nccl (or device) a broadcast still runs on the runner, whose
    arena is sized by the runner's rule: the policy's answer for an all-reduce (NCCL's, or the
    device executor's) does not enter it. (The arena was once sized by asking choose() for an
    all-reduce with NCCL and the device executor switched off, which raised ConfigError under
    these settings, so such a job's broadcasts failed.)"""
    caps = Capabilities("cuda", nccl=True, device_executor=True)
    assert choose("broadcast", 1 << 20, 4, TWO_HOSTS, Config(algorithm=algorithm), caps).algorithm == \
        ("device" if algorithm == "device" else "runner")
    assert policy.cuda_arena_slot_bytes(TWO_HOSTS, Config(algorithm=algorithm), caps, 2) == \
        policy.cuda_arena_slot_bytes(TWO_HOSTS, Config(), caps, 2) > 0
