"""The call-shape policy: which registered algorithm moves a call's bytes, and in which chunks.

One function, :func:`choose`, decides for every call of every backend and for ``blinkrun
simulate``, from (collective, bytes, dtype, layout, config) and what the backend found it can do
(:class:`Capabilities`). Every way bytes can move is one entry of :data:`ALGORITHMS` (NCCL's
``ncclGetAlgoInfo`` beside ``calcCollChunking``): a name, the collectives and backends it serves,
and whether the simulator can model it. Every chunk rule lives here too, so a grep finds them:

* the host runner's pipeline chunk (cpu: 4 MiB, so 4 MiB messages run MPI near its bandwidth
  between hosts while the one-hop stars inside a host add no steps; cuda: a sixteenth of the
  buffer, a power of two from 1 to 16 MiB, the host's per-chunk messages being tens of
  microseconds against a GPU's microsecond per MiB, capped so that a receive slot for every
  (local sender, tree, slot) fits the backend's arena: the chunk the cuda backend runs), and
  the cpu reduction's cache block (1 MiB);
* the single-copy all-reduce's chunk: the largest power of two in [256 KiB, 1 MiB] of which
  three fit in the core's L2 (a step touches three chunk-sized arrays);
* the device executor's chunk: a sixteenth of the buffer per tree, a power of two from 64 KiB
  to 1 MiB, with :data:`DEVICE_WINDOW` slots per connection (its per-chunk cost is a flag
  handshake on the device, not host messages);
* ``BLINKFLOW_CHUNK_BYTES`` (non-zero) overrides every pipeline chunk (the cuda runner's arena
  cap still applies), ``BLINKFLOW_ALGORITHM`` the choice among the algorithms that can run the
  call (a setting for one backend's algorithm, ``device``, ``nccl`` or ``single_copy``, leaves
  the other backend's calls to ``auto``). ``auto`` never picks the device executor yet: its
  kernel has not run on a GPU (``BLINKFLOW_ALGORITHM=device`` runs it).

Every chunk is a whole number of 16-element units (:meth:`Choice.chunk_elems`), so chunks start
16-byte aligned in the aligned tree ranges of :func:`~.lower.lower`.

NCCL where NCCL is already optimal: an all-reduce of the cuda backend takes ``nccl`` when the
backend found NCCL usable (CuPy's ``cupy.cuda.nccl``, every rank on its own GPU: NCCL refuses two
ranks on one GPU) and the plan's rate does not beat NCCL's modelled ring rate
(:class:`PlanRates`) -- a whole NVSwitch box, where trees and rings both reach the per-GPU link
rate. Blink's trees win where NCCL has no NVLink ring (DGX-1 subsets, PCIe boxes), as MSCCL
falls back to NCCL's own algorithms where none of its own applies. :attr:`Choice.why` says why.

The simulator charges each algorithm its step costs (:mod:`.step_costs`).

Every input is agreed: the config's fields by the job's config check, and :meth:`Capabilities.digest`
(with the layout) by the backend at construction (``blinkflow.backends.policy_agreement``), so all
ranks choose the same algorithm and lower the same schedule for every call.

Pure: no MPI, CuPy or TensorFlow.
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Callable, Optional, Tuple

from ..errors import ConfigError

from ..config import ALGORITHMS as ALGORITHM_SETTINGS
from . import step_costs
from .lower import SPAN_ALIGN_ELEMS


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One way bytes can move."""

    name: str
    collectives: Tuple[str, ...]
    backends: Tuple[str, ...]
    simulated: bool
    """``blinkrun simulate`` can predict its time (it runs the lowered schedule)."""
    what: str
    chunk_cost_us: Tuple[Tuple[str, float], ...] = ()
    """(backend, microseconds) a chunk costs a tree edge besides its bytes: what the simulator
    charges per chunk for this algorithm on that backend."""

    def cost_us(self, backend: str) -> float:
        return dict(self.chunk_cost_us).get(backend, step_costs.DEVICE_HANDSHAKE_US)


COLLECTIVES = ("allreduce", "broadcast", "allgather", "reducescatter")
ALGORITHMS = {a.name: a for a in (
    # The runner's chunk costs every rank a few host actions (CUDA calls, a launch, control
    # messages), each measured (step_costs.RUNNER_US_PER_ACTION); the simulator also charges a
    # rank's actions one after the other.
    Algorithm("runner", COLLECTIVES, ("cpu", "cuda"), True,
              "the host-driven runner over the backend's transport, chunk by chunk",
              chunk_cost_us=(("cpu", step_costs.RUNNER_CPU_US_PER_ACTION), ("cuda", step_costs.RUNNER_US_PER_ACTION))),
    # On the device a chunk is a flag handshake through peer memory (NCCL's Simple protocol).
    Algorithm("device", COLLECTIVES, ("cuda",), True,
              "the device executor: one launch runs every rank's block tables (BLINKFLOW_ALGORITHM=device)",
              chunk_cost_us=(("cuda", step_costs.DEVICE_HANDSHAKE_US),)),
    Algorithm("nccl", ("allreduce",), ("cuda",), True,
              "NCCL's all-reduce (cupy.cuda.nccl) where the plan's trees do not beat NCCL's rings",
              chunk_cost_us=(("cuda", step_costs.NCCL_STEP_US),)),
    Algorithm("single_copy", ("allreduce",), ("cpu",), False,
              "the cpu all-reduce that reads peers' tensors in place (cross-memory attach)"),
    Algorithm("mpi", ("allreduce",), ("cpu",), False,
              "MPI's own all-reduce (MPI_Iallreduce), for calls too small for a pipelined schedule to pay off"),
    Algorithm("alltoall", ("alltoall",), ("cpu", "cuda"), False, "one MPI Alltoallv"),
    Algorithm("adasum", ("allreduce",), ("cpu", "cuda"), False,
              "Horovod's adaptive summation (op=Adasum): vector halving, distance doubling, on the host over MPI"),
)}

CPU_RUNNER_CHUNK_BYTES = 4 << 20
CPU_REDUCE_BLOCK_BYTES = 1 << 20
CPU_STAGE_BYTES = 8 << 20
"""The most of a packed cpu all-reduce staged in the shared window at once (whole chunks, at
least one) in a job on one host: the window's memory, not the pipeline, bounds it."""
CPU_CROSS_HOST_STAGE_BYTES = 64 << 20
"""The same in a job across hosts, where a stage's end drains the pipeline over the network: each
stage's cross-host trees reduce and then broadcast their ranges, and the next stage starts only
when the last of it has crossed. With 8 MiB stages a 64 MiB all-reduce between two hosts over a
1 Gbit/s link took 1.04 s, with one 64 MiB stage 0.61-0.63 s (``MPI_Allreduce`` 0.57 s, the
link's bound 0.54 s; ``python -m blinkflow.bench cross-host``, docs/benchmarks.md)."""
CUDA_MIN_CHUNK_BYTES, CUDA_MAX_CHUNK_BYTES, CUDA_CHUNKS_PER_BUFFER = 1 << 20, 16 << 20, 16
SINGLE_COPY_MIN_CHUNK_BYTES, SINGLE_COPY_MAX_CHUNK_BYTES = 256 << 10, 1 << 20
SINGLE_COPY_MIN_SHARD_BYTES = 4 << 20
"""Reading tensors in place pays system calls, page pinning and a second synchronisation: it wins
only for shards of at least this many bytes (measured at 2 and 4 ranks: level at 4 MiB shards,
13-25 % faster at 8-16 MiB, slower below)."""
MPI_ALLREDUCE_MAX_BYTES = 256 << 10
"""The largest cpu all-reduce ``auto`` hands to MPI's own all-reduce. A small call is latency
bound: the runner's chunk costs every rank a few control messages and Python actions (a 1-float
call spent ~75 us in the runner against ~1.5 us in ``MPI_Iallreduce``, 2 ranks, docs/overlap.md),
while the trees pay off only once the bytes dominate (measured: docs/benchmarks.md)."""
MPI_DTYPES = frozenset({"float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                        "uint64"})
"""The dtypes MPI's predefined reductions combine (MPI has no float16 or bfloat16 arithmetic)."""
SINGLE_COPY_MIN_PIECE_BYTES = 64 << 10
"""... and tensors of at least this many bytes on average (below, a system call per tensor and
chunk costs more than packing them)."""
DEVICE_MIN_CHUNK_BYTES, DEVICE_MAX_CHUNK_BYTES, DEVICE_CHUNKS_PER_TREE = 64 << 10, 1 << 20, 16
DEVICE_WINDOW = 4
"""Slots per (peer, channel) connection of the device executor: chunks a sender runs ahead."""
CUDA_ARENA_BYTES = 256 << 20
"""The cuda runner's receive-slot memory per rank. Slots exist for every (local sender, tree,
slot), so plans with many trees (28 on a full DGX-1) get smaller chunks rather than more memory."""
CUDA_RUNNER_SLOTS = 4
"""The cuda runner's receive slots per (peer, tree): chunks a sender may run ahead."""
CUDA_SLOT_ALIGN_BYTES = 256
"""A runner slot is a whole number of 256-byte units (CUDA's allocation alignment)."""


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a backend found it can do, once, at construction (the same on every rank of a host;
    :meth:`digest` is compared across the job)."""

    backend: str
    """"cpu" or "cuda"."""
    single_copy: bool = False
    """Every local rank may read the others' memory and the host's trees are one-hop stars."""
    l2_bytes: Optional[int] = None
    """L2 of the host's CPU 0 (None: unknown), which sizes the single copy's chunk."""
    device_executor: bool = False
    """The backend can run device tables (the cuda backend, where every local GPU pair maps)."""
    nccl: bool = False
    """NCCL can run this job's all-reduces: CuPy has ``cupy.cuda.nccl`` on every rank and every
    rank drives a GPU of its own."""
    arena_bytes: int = CUDA_ARENA_BYTES
    """The cuda runner's receive-slot memory per rank (caps its chunk)."""
    runner_slots: int = CUDA_RUNNER_SLOTS
    """The cuda runner's receive slots per (peer, tree)."""

    def digest(self, layout) -> str:
        """What every rank of the job must share: the capabilities and the layout's shape. The L2
        size is left out: it sizes the single copy's chunks inside one host, whose ranks read the
        same CPU 0 (hosts of different CPUs may run one job)."""
        text = repr((self.backend, self.single_copy, self.device_executor, self.nccl, self.arena_bytes,
                     self.runner_slots, layout.hosts, layout.devices))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class PlanRates:
    """The rates NCCL's choice compares, GB/s of algorithm bandwidth: the call's plan
    (``Plan.rate_gbps``) and NCCL's modelled ring rate on the same devices
    (:func:`blinkflow.planner.ring_gbps`). Both follow from the agreed plan and topology."""

    plan_gbps: float
    nccl_gbps: float

    @property
    def trees_win(self) -> bool:
        """The plan beats NCCL's rings (a relative 1e-9 keeps equal rates equal)."""
        return self.plan_gbps > self.nccl_gbps * (1 + 1e-9)


def plan_rates(plan, topology) -> PlanRates:
    """The plan's rate against NCCL's modelled ring rate on its devices (``plan.ring_gbps`` when
    the planner filled it)."""
    from ..planner.ring import ring_gbps  # OR-Tools: loaded only when NCCL is an option

    return PlanRates(plan.rate_gbps, plan.ring_gbps or ring_gbps(topology, plan.devices, plan.collective))


@dataclasses.dataclass(frozen=True)
class Choice:
    """The policy's answer for one call."""

    algorithm: str
    chunk_bytes: int
    """The pipeline chunk (runner, device) or the single copy's chunk; 0 where none applies."""
    block_bytes: int = 0
    """The cpu reduction's cache block."""
    window: int = 0
    """Slots per connection (device executor)."""
    stage_bytes: int = 0
    """The cpu runner's stage: a packed all-reduce runs a stage at a time (0: whole)."""
    why: str = ""
    """Why this algorithm (``blinkrun simulate`` prints it)."""

    def chunk_elems(self, itemsize: int) -> int:
        """The chunk in elements of ``itemsize`` bytes (:func:`chunk_elems`)."""
        return chunk_elems(self.chunk_bytes, itemsize)

    def stage_elems(self, n: int, itemsize: int) -> int:
        """Elements of one stage of an ``n``-element packed all-reduce: ``n`` when it fits one (or
        nothing is staged), else whole chunks, at least one, within ``stage_bytes``."""
        if not self.stage_bytes:
            return n
        chunk = self.chunk_elems(itemsize)
        stage = max(chunk, self.stage_bytes // itemsize // chunk * chunk)
        return n if n <= stage else stage

    @property
    def phase(self) -> str:
        """The timeline phase that names this algorithm."""
        return "ALGORITHM_" + self.algorithm.upper()


def choose(collective: str, nbytes: int, itemsize: int, layout, config, caps: Capabilities,
           npieces: int = 1, ntrees: int = 1, op=None, rates: Optional[PlanRates] = None,
           dtype: Optional[str] = None, trees_allow_single_copy: Optional[Callable[[], bool]] = None) -> Choice:
    """The algorithm and chunk of one call: ``nbytes`` of elements of ``itemsize`` bytes
    (``npieces`` tensors of an all-reduce that were not packed; ``ntrees`` of the call's plan,
    which the device executor cuts its chunks by and the cuda runner's arena shares its slots
    among; ``op`` its reduce op, None for an elementwise one; ``rates`` the plan's and NCCL's,
    None when unknown: ``auto`` then keeps the trees; ``dtype`` its element type's name, None when
    unknown: only a dtype of :data:`MPI_DTYPES` may take ``mpi``; ``trees_allow_single_copy`` says
    whether the call's trees let the single copy run it, asked only where the single copy would
    be chosen, since it lowers the call's program: the cpu backend passes it, and where it says
    no the call takes what it would without the single copy). Raises ConfigError when
    ``BLINKFLOW_ALGORITHM`` names an algorithm that cannot run this call. An Adasum all-reduce
    always takes ``adasum``: it is not elementwise, so no tree runs it, and
    ``BLINKFLOW_ALGORITHM`` (a choice among the trees' algorithms) does not apply to it."""
    fixed = config.chunk_bytes if config is not None else 0
    wanted = getattr(config, "algorithm", "auto") if config is not None else "auto"
    if collective == "alltoall":
        return Choice("alltoall", 0)
    if op is not None and not op.elementwise:
        if collective != "allreduce":
            raise ConfigError(f"{op.name.title()} is an all-reduce; no algorithm runs a {collective} with it")
        return Choice("adasum", 0)
    if collective not in COLLECTIVES:
        raise ConfigError(f"no algorithm runs {collective!r}; the collectives are {', '.join(COLLECTIVES)}")
    if wanted not in ALGORITHM_SETTINGS:
        raise ConfigError(f"BLINKFLOW_ALGORITHM must be one of {', '.join(ALGORITHM_SETTINGS)}, got {wanted!r}")
    if caps.backend not in ALGORITHMS.get(wanted, ALGORITHMS["runner"]).backends:
        wanted = "auto"  # a setting for the other backend: a job's numpy tensors keep the cpu's choice
    # ``auto`` keeps the host-driven runner on GPUs: the device executor's kernel has been
    # compiled and emulated but has not yet run on a GPU, so it runs only when asked for.
    if wanted == "device":
        if not caps.device_executor:
            raise ConfigError(f"BLINKFLOW_ALGORITHM=device: the {caps.backend} backend of this job has no device "
                              "executor; set BLINKFLOW_ALGORITHM=auto")
        return Choice("device", fixed or device_chunk_bytes(nbytes, ntrees), window=DEVICE_WINDOW,
                      why="BLINKFLOW_ALGORITHM=device")
    nccl = _nccl_reason(collective, caps, rates)
    if wanted == "nccl" and nccl is None:
        wanted = "auto"  # NCCL runs all-reduces only: the job's other collectives keep the policy's choice
    if wanted == "nccl":
        if not caps.nccl:
            raise ConfigError(f"BLINKFLOW_ALGORITHM=nccl: {nccl}; set BLINKFLOW_ALGORITHM=auto")
        return Choice("nccl", 0, why="BLINKFLOW_ALGORITHM=nccl")
    if wanted == "auto" and nccl is not None and not nccl.startswith("no NCCL") and not rates.trees_win:
        return Choice("nccl", 0, why=nccl)
    mpi = collective == "allreduce" and caps.backend in ALGORITHMS["mpi"].backends and dtype in MPI_DTYPES
    if wanted == "mpi" and mpi:
        return Choice("mpi", 0, why="BLINKFLOW_ALGORITHM=mpi")
    if wanted == "mpi":
        wanted = "auto"  # MPI reduces all-reduces of its dtypes: the job's other calls keep the policy's choice
    if wanted == "auto" and mpi and nbytes <= MPI_ALLREDUCE_MAX_BYTES:
        return Choice("mpi", 0, why=f"{nbytes} bytes: latency bound (at most {MPI_ALLREDUCE_MAX_BYTES})")
    single = (collective == "allreduce" and caps.single_copy and nbytes >= SINGLE_COPY_MIN_SHARD_BYTES * layout.local_size
              and nbytes >= SINGLE_COPY_MIN_PIECE_BYTES * max(1, npieces))
    forced = wanted == "single_copy" and collective == "allreduce" and caps.single_copy
    if (single and wanted == "auto") or forced:
        if trees_allow_single_copy is None or trees_allow_single_copy():
            return Choice("single_copy", fixed or single_copy_chunk_bytes(caps.l2_bytes))
        single = False
    if wanted == "single_copy" and not single:
        raise ConfigError("BLINKFLOW_ALGORITHM=single_copy runs all-reduces of the cpu backend where ranks may read "
                          "each other's memory; set BLINKFLOW_ALGORITHM=auto")
    if caps.backend == "cuda":
        chunk = cuda_runner_slot_cap(fixed or cuda_runner_chunk_bytes(nbytes), layout, ntrees, caps)
        return Choice("runner", chunk, why=nccl or "")
    stage = CPU_CROSS_HOST_STAGE_BYTES if layout.nhosts > 1 else CPU_STAGE_BYTES
    return Choice("runner", cpu_runner_chunk_bytes(config), block_bytes=fixed or CPU_REDUCE_BLOCK_BYTES,
                  stage_bytes=stage)


def chunk_elems(chunk_bytes: int, itemsize: int) -> int:
    """A chunk of ``chunk_bytes`` in elements of ``itemsize`` bytes: whole units of
    :data:`~blinkflow.schedule.lower.SPAN_ALIGN_ELEMS` (at least one), so every chunk of a
    16-byte aligned tree range starts 16-byte aligned too."""
    return max(1, chunk_bytes // itemsize // SPAN_ALIGN_ELEMS) * SPAN_ALIGN_ELEMS


def cpu_runner_chunk_bytes(config) -> int:
    """The cpu runner's chunk: ``BLINKFLOW_CHUNK_BYTES``, else :data:`CPU_RUNNER_CHUNK_BYTES`
    whatever the call's size (so the single copy, which runs the runner's schedule, reads its
    stars off the program the runner would run, without asking :func:`choose` first)."""
    return (config.chunk_bytes if config is not None else 0) or CPU_RUNNER_CHUNK_BYTES


def _nccl_reason(collective: str, caps: Capabilities, rates: Optional[PlanRates]) -> Optional[str]:
    """Why NCCL would or would not run this call: None where NCCL is no algorithm of the call
    (another backend or collective); "no NCCL ..." where it cannot run; otherwise the rates."""
    if caps.backend != "cuda" or collective != "allreduce":
        return None
    if not caps.nccl:
        return "no NCCL here (cupy.cuda.nccl absent, or ranks share a GPU)"
    if rates is None:
        return "no NCCL: the plan's rate is unknown"
    verdict = "beat" if rates.trees_win else "do not beat"
    return (f"the plan's trees ({rates.plan_gbps:.1f} GB/s) {verdict} NCCL's rings "
            f"({rates.nccl_gbps:.1f} GB/s)")


def cuda_runner_slot_cap(chunk_bytes: int, layout, ntrees: int, caps: Capabilities) -> int:
    """``chunk_bytes`` capped so that a runner slot for every (local sender, tree, slot) fits
    ``caps.arena_bytes`` on the job's largest host, in whole 256-byte units: the chunk the cuda
    runner runs. The same on every rank (hosts of 8 and 4 GPUs that sized it by their own host
    lowered different chunks, whose transfers between hosts then did not match)."""
    senders = max((len(r) for r in layout.host_ranks), default=1) if layout is not None else 1
    per_slot = caps.arena_bytes // (max(1, senders) * max(1, ntrees) * max(1, caps.runner_slots))
    return min(chunk_bytes, max(CUDA_SLOT_ALIGN_BYTES, per_slot // CUDA_SLOT_ALIGN_BYTES * CUDA_SLOT_ALIGN_BYTES))


def cuda_arena_slot_bytes(layout, config, caps: Capabilities, ntrees: int) -> int:
    """The cuda runner's receive slot at its smallest: the runner's chunk for the smallest call
    (or ``BLINKFLOW_CHUNK_BYTES``), capped as every runner chunk is (:func:`cuda_runner_slot_cap`),
    so that small programs share one arena; a call whose chunk is larger grows it."""
    fixed = config.chunk_bytes if config is not None else 0
    return cuda_runner_slot_cap(fixed or cuda_runner_chunk_bytes(0), layout, ntrees, caps)


def cuda_runner_chunk_bytes(nbytes: int) -> int:
    """The largest power of two not above a sixteenth of ``nbytes``, within [1, 16] MiB: on one
    H100 shared by 2 ranks 1 MiB chunks held a 256 MiB all-reduce to 11-18 GB/s bus bandwidth where
    4 and 16 MiB gave 61 and 51; at 16 MiB and below 1 MiB was the fastest."""
    want = max(1, nbytes // CUDA_CHUNKS_PER_BUFFER)
    return min(CUDA_MAX_CHUNK_BYTES, max(CUDA_MIN_CHUNK_BYTES, 1 << (want.bit_length() - 1)))


def device_chunk_bytes(nbytes: int, ntrees: int) -> int:
    """A sixteenth of a tree's share, as a power of two within [64 KiB, 1 MiB]: on the device a
    chunk costs a flag handshake, so chunks stay small enough to fill the pipeline early."""
    want = max(1, nbytes // max(1, ntrees) // DEVICE_CHUNKS_PER_TREE)
    return min(DEVICE_MAX_CHUNK_BYTES, max(DEVICE_MIN_CHUNK_BYTES, 1 << (want.bit_length() - 1)))


def single_copy_chunk_bytes(l2_bytes: Optional[int]) -> int:
    """The largest power of two in [256 KiB, 1 MiB] of which three fit in ``l2_bytes`` (1 MiB
    when unknown). A chunk's step touches three chunk-sized arrays (this rank's slice, the peer's
    slice landed in scratch, the result), so they stay in L2 from the landing to the write-back.
    Measured at 2 ranks, 16 MiB, on a Xeon with 2 MiB of L2: 512 KiB chunks 2.46-2.84 ms against
    1 MiB chunks (three of which spill) 2.88-2.95 ms, alternating."""
    if not l2_bytes:
        return SINGLE_COPY_MAX_CHUNK_BYTES
    chunk = SINGLE_COPY_MAX_CHUNK_BYTES
    while chunk > SINGLE_COPY_MIN_CHUNK_BYTES and 3 * chunk > l2_bytes:
        chunk //= 2
    return chunk
