"""``kernels/interpreter.cu`` under ThreadSanitizer: the shipped kernel source, built for the host
(``kernel_host.interpreter_source``: every CUDA thread an OS thread, ``__syncthreads`` a real
barrier, the PTX loads and stores of ``kernels/common.cuh`` mapped to C++ atomics of the same
strength), linked into a small program with ``-fsanitize=thread`` and run on a loopback launch
(``device_abi.loopback``).

The program is a separate process, not a library loaded into Python, because ThreadSanitizer's
runtime must start with the process. It reads one launch file (``write_launch``), runs the calls
one after the other and writes every call's buffers back; ThreadSanitizer's reports go to its
stderr (``RaceRun.races``).

Launch file, little-endian int64 throughout: a header of ``HEADER`` fields, then
``block_offsets[nblocks]``, ``steps[nsteps, 11]``, ``inputs[ninputs, 2]``, ``waits[nwaits, 2]``,
``block_start[nblocks + 1]``, ``conns[nconns, 4]`` (ring, tail and head as byte offsets into the
launch's memory block, which the program allocates), then the input buffers of every call
(``calls x nranks x nelems`` elements). The buffers start ``misalign`` bytes past a 256-byte
boundary, so steps' spans can start anywhere.
"""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from blinkflow.backends.device_abi import LoopbackLaunch

from kernel_host import interpreter_source

CXX = shutil.which("g++") or shutil.which("clang++")
HEADER = ("nblocks", "nconns", "nsteps", "ninputs", "nwaits", "window", "slot_elems", "mem_bytes", "progress_offset",
          "nranks", "nelems", "itemsize", "calls", "misalign", "threads", "timeout_ms")
ABORTED = 3
"""The program's exit status when its watchdog had to raise the abort flag (a hang)."""
TSAN_OPTIONS = "halt_on_error=0 exitcode=66 report_signal_unsafe=0 history_size=4"

MAIN = r"""
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

static std::vector<long long> bf_read(FILE* f, long long n) {
    std::vector<long long> v((size_t)(n > 0 ? n : 1), 0);
    if (n > 0 && fread(v.data(), 8, (size_t)n, f) != (size_t)n) { fprintf(stderr, "short launch file\n"); exit(2); }
    return v;
}

typedef void (*BfEntry)(void*, const long long*, const long long*, const long long*, const long long*,
                        const long long*, const long long*, long long*, const int*, long long, long long, long long,
                        int, int);

int main(int argc, char** argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s LAUNCH OUT ENTRY\n", argv[0]); return 2; }
    FILE* f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    std::vector<long long> h = bf_read(f, HEADER_FIELDS);
    const long long nblocks = h[0], nconns = h[1], nsteps = h[2], ninputs = h[3], nwaits = h[4], window = h[5],
                    slot_elems = h[6], mem_bytes = h[7], progress_offset = h[8], nranks = h[9], nelems = h[10],
                    itemsize = h[11], calls = h[12], misalign = h[13], threads = h[14], timeout_ms = h[15];
    std::vector<long long> offs = bf_read(f, nblocks), steps = bf_read(f, nsteps * 11), inputs = bf_read(f, ninputs * 2),
                           waits = bf_read(f, nwaits * 2), starts = bf_read(f, nblocks + 1), conns = bf_read(f, nconns * 4);
    const size_t row_bytes = (size_t)(nranks * nelems * itemsize);
    std::vector<unsigned char> io((size_t)calls * row_bytes + 1);
    if (fread(io.data(), 1, (size_t)calls * row_bytes, f) != (size_t)calls * row_bytes) { fprintf(stderr, "short buffers\n"); return 2; }
    fclose(f);
    unsigned char* memory = static_cast<unsigned char*>(aligned_alloc(256, (size_t)((mem_bytes + 255) / 256 * 256)));
    memset(memory, 0, (size_t)mem_bytes);
    for (long long r = 0; r < nconns; ++r)
        for (int c = 0; c < 3; ++c) conns[(size_t)(r * 4 + c)] += (long long)memory;
    unsigned char* storage = static_cast<unsigned char*>(aligned_alloc(256, (row_bytes + 511) / 256 * 256));
    unsigned char* bufs = storage + misalign;
    BfEntry entry = 0;
    ENTRY_TABLE
    if (!entry) { fprintf(stderr, "no entry %s\n", argv[2]); return 2; }
    int abort_flag = 0;
    bool aborted = false;
    for (long long call = 0; call < calls && !aborted; ++call) {
        memcpy(bufs, io.data() + call * row_bytes, row_bytes);
        std::mutex m;
        std::condition_variable cv;
        bool done = false;
        std::thread watchdog([&] {
            std::unique_lock<std::mutex> lock(m);
            if (!cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return done; })) {
                __atomic_store_n(&abort_flag, 1, __ATOMIC_RELAXED);
                aborted = true;
            }
        });
        entry(bufs, offs.data(), steps.data(), inputs.data(), waits.data(), starts.data(), conns.data(),
              reinterpret_cast<long long*>(memory + progress_offset), &abort_flag, call, window, slot_elems,
              (int)nblocks, (int)threads);
        { std::lock_guard<std::mutex> lock(m); done = true; }
        cv.notify_all();
        watchdog.join();
        memcpy(io.data() + call * row_bytes, bufs, row_bytes);
    }
    FILE* o = fopen(argv[2], "wb");
    if (!o || fwrite(io.data(), 1, (size_t)calls * row_bytes, o) != (size_t)calls * row_bytes) { perror(argv[2]); return 2; }
    fclose(o);
    free(storage);
    free(memory);
    return aborted ? ABORTED_STATUS : 0;
}
"""


def tsan_missing(directory: Path) -> Optional[str]:
    """Why no ThreadSanitizer build can run here (None when one can): no C++ compiler, or one
    whose ``-fsanitize=thread`` does not build or run a two-thread program."""
    if CXX is None:
        return "no C++ compiler"
    src = directory / "tsan_probe.cpp"
    src.write_text("#include <thread>\nint main() { int x = 0; std::thread t([&] { x = 1; }); t.join(); return x - 1; }\n")
    exe = directory / "tsan_probe"
    proc = subprocess.run([CXX, "-std=c++17", "-fsanitize=thread", "-pthread", "-o", str(exe), str(src)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return f"{CXX} cannot build with -fsanitize=thread: {proc.stderr.strip()[-300:]}"
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        return f"a ThreadSanitizer program does not run here: {run.stderr.strip()[-300:]}"
    return None


def build(directory: Path, instances: Sequence[tuple], source: Optional[str] = None, name: str = "interpreter_tsan") -> Path:
    """The ThreadSanitizer program of ``kernels/interpreter.cu`` (or ``source``, an edited copy)
    with an entry per (dtype, op code) of ``instances``."""
    entries = "\n".join(f'    if (std::string(argv[3]) == "interpreter_{dt}_{code}") entry = interpreter_{dt}_{code};'
                        for dt, code in instances)
    main = (MAIN.replace("HEADER_FIELDS", str(len(HEADER))).replace("ENTRY_TABLE", entries)
            .replace("ABORTED_STATUS", str(ABORTED)))
    src = directory / f"{name}.cpp"
    src.write_text(interpreter_source(instances, source) + main)
    exe = directory / name
    cmd = [CXX, "-std=c++17", "-O1", "-g", "-fsanitize=thread", "-pthread", "-Wno-unknown-pragmas", "-o", str(exe),
           str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the ThreadSanitizer build of the interpreter failed:\n{proc.stderr[-4000:]}")
    return exe


@dataclasses.dataclass
class RaceRun:
    """What one run of the program left: every call's buffers, its exit status and stderr."""

    outputs: List[np.ndarray]
    """Per call, the ``[nranks, nelems]`` buffers after it."""
    status: int
    stderr: str

    @property
    def races(self) -> int:
        """ThreadSanitizer's data-race reports."""
        return self.stderr.count("WARNING: ThreadSanitizer: data race")

    @property
    def warnings(self) -> int:
        """Every ThreadSanitizer report (races and anything else it found)."""
        return self.stderr.count("WARNING: ThreadSanitizer")


def run(exe: Path, directory: Path, launch: LoopbackLaunch, calls: Sequence[np.ndarray], entry: str,
        threads: int, misalign: int = 0, timeout_s: float = 60.0) -> RaceRun:
    """Run the launch once per array of ``calls`` (``[nranks, nelems]`` each, the buffers of one
    call) with ``threads`` threads per block and buffers ``misalign`` bytes off a 256-byte
    boundary; a call still running after ``timeout_s`` is aborted (status ``ABORTED``)."""
    enc = launch.encoded
    dtype = calls[0].dtype
    conns = enc.conns(launch.conn_offsets[:, 0], launch.conn_offsets[:, 1], launch.conn_offsets[:, 2])
    header = dict(nblocks=enc.nblocks, nconns=len(enc.transfers), nsteps=len(enc.steps), ninputs=len(enc.inputs),
                  nwaits=len(enc.waits), window=enc.window, slot_elems=enc.slot_elems, mem_bytes=launch.nbytes,
                  progress_offset=launch.progress_offset, nranks=launch.nranks, nelems=launch.nelems,
                  itemsize=dtype.itemsize, calls=len(calls), misalign=misalign, threads=threads,
                  timeout_ms=int(timeout_s * 1000))
    parts = [np.array([header[k] for k in HEADER], np.int64), launch.block_offsets, enc.steps, enc.inputs, enc.waits,
             enc.block_start, conns]
    path = directory / "launch.bin"
    with open(path, "wb") as f:
        for p in parts:
            f.write(np.ascontiguousarray(p, np.int64).tobytes())
        for c in calls:
            f.write(np.ascontiguousarray(c).tobytes())
    out = directory / "out.bin"
    proc = subprocess.run([str(exe), str(path), str(out), entry], capture_output=True, text=True,
                          env={"TSAN_OPTIONS": TSAN_OPTIONS}, timeout=timeout_s * len(calls) + 120)
    outputs = []
    if out.exists():
        data = np.fromfile(out, dtype).reshape(len(calls), launch.nranks, launch.nelems)
        outputs = list(data)
        out.unlink()
    return RaceRun(outputs=outputs, status=proc.returncode, stderr=proc.stderr)
