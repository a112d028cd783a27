#!/usr/bin/env bash
# The CUDA backend checked on a real GPU, in one command of under 8 minutes:
#
#   scripts/gpu_check.sh                          # on a GPU machine; every section skips without one
#   GPU_CHECK_DEVICE=cpu scripts/gpu_check.sh     # the same sections on cpu(), tiny: checks the plumbing
#
# Sections (each with its own time limit, its full output in $OUT/<section>.log):
#   env            GPU model, driver, CUDA, NVRTC, cupy, torch and tool versions
#   build          the Cython extension built in place with this machine's Python; every CUDA source
#                  compiled once by NVRTC (which also fills cupy's kernel cache for the tests)
#   backend        the backend contract suite on cuda() (autotests/backend, autotests/ndarray, -m gpu;
#                  property-based cases at the "ci" hypothesis profile's bound of examples)
#   library        op, gradient, nn and model tests on cuda() (autotests/library, -m gpu)
#   notebooks      lab1 and hw3 graded (their CUDA cells on the GPU) and lecture 12 executed
#   bench_backend  benchmarks/bench_backend.py's GPU rows against cupy (matmul 1024/2048/4096 against
#                  cuBLAS, element-wise, reductions, compact of a transposed view)
#   bench_models   benchmarks/bench_models.py: ResNet9 and an MLPResNet epoch on cuda() against PyTorch CUDA
# backend, library and notebooks run side by side; the benchmarks run afterwards on a quiet machine.
# The last line printed is the summary (also $OUT/summary.txt). Exit status 0 when every section that
# ran passed, or when there is no GPU.
#
# Variables: OUT (default: a new folder under /tmp), PYTHON (default: the first of .venv/bin/python and
# python3 that imports cupy, else the first that runs), GPU_CHECK_BUDGET (seconds, default 470),
# GPU_CHECK_JOBS (pytest-xdist workers per test section; default on a GPU 8 for backend and 6 for
# library, on the CPU 1).
set -u
cd "$(dirname "$0")/.." || exit 2
REPO=$(pwd)
DEVICE=${GPU_CHECK_DEVICE:-cuda}
BUDGET=${GPU_CHECK_BUDGET:-470}
case "$DEVICE" in cuda|cpu) ;; *) echo "GPU_CHECK_DEVICE must be cuda or cpu, not $DEVICE"; exit 2 ;; esac

pick_python() {
    local candidates=() c
    [ -n "${PYTHON:-}" ] && candidates+=("$PYTHON")
    [ -x .venv/bin/python ] && candidates+=("$REPO/.venv/bin/python")
    candidates+=(python3 python)
    if [ "$DEVICE" = cuda ]; then
        for c in "${candidates[@]}"; do "$c" -c "import cupy" >/dev/null 2>&1 && { echo "$c"; return; }; done
    fi
    for c in "${candidates[@]}"; do "$c" -c "import numpy" >/dev/null 2>&1 && { echo "$c"; return; }; done
    echo python3
}
PY=$(pick_python)

OUT=${OUT:-$(mktemp -d /tmp/gpu_check_out.XXXXXX)}
mkdir -p "$OUT"
STATE=$(mktemp -d /tmp/gpu_check_state.XXXXXX)
trap 'rm -rf "$STATE"' EXIT
export GPU_CHECK_TMP="$STATE/tmp"
mkdir -p "$GPU_CHECK_TMP"
export PYTHONPATH="$REPO:$REPO/course${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=ci MPLBACKEND=Agg
# the notebooks' CUDA cells must run on the GPU, never fall back to the host stand-in
if [ "$DEVICE" = cuda ]; then export COURSEKIT_CUDA=gpu; else export COURSEKIT_CUDA=host; fi
START=$(date +%s)
DEADLINE=$((START + BUDGET))
SECTIONS="env build backend library notebooks bench_backend bench_models"
echo "gpu_check: device $DEVICE, python $PY, logs in $OUT, budget ${BUDGET}s"

has() { "$PY" -c "import $1" >/dev/null 2>&1; }

# seconds a section may take: its cap, less what the sections after it need at least, but never
# under its floor (15 s unless given: the build's is the time it takes, since a build cut short
# leaves every later section without the package)
limit() {
    local cap=$1 reserve=$2 floor=${3:-15} left
    left=$((DEADLINE - $(date +%s) - reserve))
    [ "$left" -lt "$cap" ] && cap=$left
    [ "$cap" -lt "$floor" ] && cap=$floor
    echo "$cap"
}

# section NAME SECONDS CMD...: run CMD under a time limit, its output in $OUT/NAME.log
section() {
    local name=$1 seconds=$2 start rc
    shift 2
    start=$(date +%s)
    { echo "\$ $*"; echo "(limit ${seconds}s)"; } >"$OUT/$name.log"
    timeout -k 10 "$seconds" "$@" >>"$OUT/$name.log" 2>&1
    rc=$?
    echo "$rc $(($(date +%s) - start))" >"$STATE/$name.status"
    return $rc
}

skip() {  # skip NAME WHY
    echo "skipped: $2" >"$OUT/$1.log"
    echo "0 0 skip: $2" >"$STATE/$1.status"
}

# what each section shows on the terminal; the whole output is in its log
show() {
    local name=$1 log="$OUT/$1.log" status
    status=$(cat "$STATE/$name.status" 2>/dev/null || echo "? ?")
    echo
    echo "=== $name (exit ${status%% *}, ${status#* }s; full output: $log)"
    case "$name" in
        backend|library)
            # failures with their one-line reasons, the slowest tests, the closing line
            grep -E "^(FAILED|ERROR) |^=+ .*(passed|failed|error|skipped|no tests).* =+$|^[0-9.]+s (call|setup|teardown) " "$log" | head -60
            grep -qE "^=+ .* in [0-9.]+s" "$log" || tail -5 "$log" ;;
        notebooks) grep -E "^NB " "$log" | head -60 ;;
        build) tail -25 "$log" ;;
        *) head -60 "$log" ;;
    esac
}

# -v: a section stopped at its limit still shows each finished test's outcome
PYTEST_ARGS=(-p no:cacheprovider -p scripts.gpu_check_plugin -v -rfE --tb=short --durations=10)
has pytest_timeout && PYTEST_ARGS+=(--timeout=120)
workers() {  # pytest-xdist arguments for N workers (the library has the most tests)
    local n=${GPU_CHECK_JOBS:-$1}
    [ "$DEVICE" = cpu ] && n=${GPU_CHECK_JOBS:-1}
    if [ "$n" -gt 1 ] && has xdist; then echo "-n $n"; fi
}
# a dozen workers each starting a BLAS and an OpenMP pool of every core would fight over 16 cores;
# the tests' own work is on the GPU
PYTEST_ENV=(env OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 MKL_NUM_THREADS=2)

if [ "$DEVICE" = cuda ]; then
    BACKEND_TESTS=(-m gpu autotests/backend autotests/ndarray)
    LIBRARY_TESTS=(-m gpu autotests/library)
    BENCH_BACKEND=(benchmarks/bench_backend.py --cuda-only --sizes 1024,2048 --repeats 10)
    BENCH_MODELS=(benchmarks/bench_models.py --device cuda --only resnet9 mlp --repeat 5)
    CAP_TESTS=200; CAP_BENCH_BACKEND=60; CAP_BENCH_MODELS=100
else
    # a few of the same tests on cpu(): enough to see each step run and its output parsed
    BACKEND_TESTS=(-m "not gpu" -k "cpu and not numpy and (compact or setitem)" autotests/backend/test_backend_contract.py)
    LIBRARY_TESTS=(-m "not gpu" -k "cpu and not numpy and (matmul or summation)" autotests/library/test_ops_gradients.py)
    BENCH_BACKEND=(benchmarks/bench_backend.py --no-cuda --quick --sizes 128 --repeats 1 --threads 1
                   --only "matmul 128" ewise_add "compact transpose")
    BENCH_MODELS=(benchmarks/bench_models.py --device cpu --only resnet9 --repeat 1)
    CAP_TESTS=200; CAP_BENCH_BACKEND=60; CAP_BENCH_MODELS=100
fi
NOTEBOOKS=(course/assignments/lab1/lab1.ipynb course/assignments/hw3/hw3.ipynb course/lectures/12_gpu_acceleration.ipynb)

if [ "$DEVICE" = cuda ]; then
    PROBE=$("$PY" scripts/gpu_check.py probe 2>&1 | tail -1)
    if [ "${PROBE%% *}" != gpu ]; then
        WHY=${PROBE#none }
        echo "nogpu ${WHY:-no CUDA device}" >"$STATE/mode"
        for s in $SECTIONS; do
            skip "$s" "no CUDA device (${WHY:-unknown})"
            echo "$s: skipped, no CUDA device (${WHY:-unknown})"
        done
        echo "$(($(date +%s) - START))" >"$STATE/total"
        "$PY" scripts/gpu_check.py summary "$OUT" --state "$STATE" | tee "$OUT/summary.txt"
        exit 0
    fi
    echo "cuda on ${PROBE#gpu }" >"$STATE/mode"
else
    echo "cpu dry run" >"$STATE/mode"
fi

# ---- env and build, one after the other
section env "$(limit 30 400)" "$PY" scripts/gpu_check.py env
show env
build_all() {
    local rc=0
    "$PY" setup.py -q build_ext --inplace -j 4 || {
        echo "setup.py build_ext failed (above); the same extensions without pyproject.toml's metadata:"
        "$PY" scripts/gpu_check.py build-ext -j 4; } || rc=1
    "$PY" -c 'import needle_kernels.backend_ndarray as nd; print("devices:", [(str(d), d.enabled(), d.reason) for d in nd.all_devices()])' || rc=1
    "$PY" scripts/gpu_check.py warm-cuda || rc=1
    return $rc
}
export -f build_all
export PY
# a failed build skips nothing: the CUDA backend is Python and cupy, and its tests still say what they can
if has Cython && has setuptools; then
    section build "$(limit 150 280 100)" bash -c build_all
else
    skip build "Cython or setuptools is missing: $("$PY" -c 'import Cython, setuptools' 2>&1 | tail -1)"
fi
show build

# ---- the tests and the notebooks, side by side
PHASE=$(limit "$CAP_TESTS" $((CAP_BENCH_BACKEND + CAP_BENCH_MODELS)))
pids=()
if has pytest && has hypothesis; then
    # $(workers N) unquoted: it is no word or two
    section backend "$PHASE" "${PYTEST_ENV[@]}" "$PY" -m pytest "${PYTEST_ARGS[@]}" $(workers 8) "${BACKEND_TESTS[@]}" &
    pids+=($!)
    section library "$PHASE" "${PYTEST_ENV[@]}" "$PY" -m pytest "${PYTEST_ARGS[@]}" $(workers 6) "${LIBRARY_TESTS[@]}" &
    pids+=($!)
else
    missing=$("$PY" -c 'import pytest, hypothesis' 2>&1 | tail -1)
    skip backend "pytest or hypothesis is missing: $missing"
    skip library "pytest or hypothesis is missing: $missing"
fi
if has Cython; then
    section notebooks "$PHASE" "$PY" scripts/gpu_check.py notebook --deadline $((PHASE - 5)) "${NOTEBOOKS[@]}" & pids+=($!)
else
    skip notebooks "Cython is missing (the assignments' %%cython cells)"
fi
for p in "${pids[@]}"; do wait "$p"; done
for s in backend library notebooks; do show "$s"; done

# ---- benchmarks, alone on the machine
section bench_backend "$(limit "$CAP_BENCH_BACKEND" "$CAP_BENCH_MODELS")" "$PY" "${BENCH_BACKEND[@]}"
section bench_models "$(limit "$CAP_BENCH_MODELS" 0)" "$PY" "${BENCH_MODELS[@]}"
show bench_backend
show bench_models

echo "$(($(date +%s) - START))" >"$STATE/total"
echo
"$PY" scripts/gpu_check.py summary "$OUT" --state "$STATE" >"$STATE/summary"
RC=$?
cp "$STATE/summary" "$OUT/summary.txt"
cat "$STATE/summary"
exit $RC
