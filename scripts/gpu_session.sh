#!/usr/bin/env bash
# One GPU session in one or two commands: build, test, sanitise and benchmark the CUDA backend on a
# machine with an NVIDIA GPU (written for an H100/H200, sm_90), collecting every log and JSON line
# into one folder, so that scarce GPU time goes to running, not to setting up.
#
#   bash scripts/gpu_session.sh test  [OUT]   # build the GPU tests, run them, compute-sanitizer (≈ 6–9 min)
#   bash scripts/gpu_session.sh bench [OUT]   # the GPU benchmarks (bench/gpu/run_gpu.sh) and the report
#   bash scripts/gpu_session.sh all   [OUT]   # both
#
# OUT (default $OUT, else gpu_out/) receives at most eight files: session.log (device, toolchain,
# build, every step's outcome and time), gpu_tests.log (each case's outcome and time, the output
# of the failing ones), sanitizer.log, each gpu_<suite>.jsonl of bench/results (this run's rows last) and benchmarks.md. Nothing needs a network: the tests are compiled by nvcc
# directly (no CMake package lookup); doctest's single header is taken from DOCTEST_DIR (default
# .carry/doctest, prepared on a machine with doctest by
#   mkdir -p .carry/doctest/doctest && cp /usr/include/doctest/doctest.h .carry/doctest/doctest/
# and carried), else from the system. Python peers for the benchmarks come as wheels in .whl/ (see
# bench/gpu/run_gpu.sh). Environment: CUDA_ARCH (default 90), JOBS (default nproc), SANITIZE_CASES
# (doctest -tc filter of the cases run under compute-sanitizer), STEP_TIMEOUT (seconds per step),
# CASE_TIMEOUT (seconds per test case), BENCH_TIMEOUT (seconds for the whole bench phase), SANITIZE_TOOLS (default memcheck racecheck synccheck initcheck),
# PREBUILT (a folder with memsafe_gpu_tests, memsafe_bench_cuda and fma_peak_cuda built on another
# machine for this GPU, e.g. .carry/bin: used when they start here, else everything is built here),
# NCCL_TESTS (0: skip the NCCL tests), MPI_TESTS (0: skip the distributed GPU tests altogether),
# SANITIZE_TIMEOUT (seconds per sanitizer tool, default STEP_TIMEOUT), SANITIZE_CASES_<tool> (that
# tool's own case filter, e.g. SANITIZE_CASES_racecheck for the slowest tool), BENCH_ARGS (run_gpu.py options for the bench phase, e.g. "--impls memsafe-cuda,keops --only n=1000000"),
# MEMSAFE_GIT_REV (the revision the results rows record, where the copy's .git is not the code's).
#
# Every test case runs in its own process (doctest --order-by=name --first=i --last=i), so that a
# crash or a sticky CUDA error in one case cannot hide the others; gpu_tests.log lists each case's
# outcome and time.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
phase=${1:-all}
out=${2:-${OUT:-gpu_out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
arch=${CUDA_ARCH:-90}
jobs=${JOBS:-$(nproc)}
step_timeout=${STEP_TIMEOUT:-420}
build=build/gpu_session
mkdir -p "$build"
log="$out/session.log"
status=0

say() { echo "[gpu_session $(date -u +%H:%M:%S)] $*" | tee -a "$log" >&2; }
# step NAME CMD...: runs CMD with a time limit, output appended to the log; records the outcome.
step() {
  local name=$1; shift
  local t0=$SECONDS rc
  say "start $name"
  if declare -F "$1" >/dev/null; then
    "$@" >>"$log" 2>&1  # a function here: it bounds its own commands (timeout cannot run a function)
  else
    timeout "$step_timeout" "$@" >>"$log" 2>&1
  fi
  rc=$?
  say "end $name: exit $rc in $((SECONDS - t0)) s"
  ((rc == 0)) || status=1
  return $rc
}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  say "no NVIDIA GPU visible (nvidia-smi missing or listing none): run this on a machine with one"
  exit 1
fi
{
  echo "== device"; nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv
  echo "== toolchain"; nvcc --version | tail -2; g++ --version | head -1; echo "git $(git rev-parse --short=12 HEAD 2>/dev/null)"
} >>"$log" 2>&1

doctest_dir=${DOCTEST_DIR:-.carry/doctest}
inc=(-Iinclude -Itests)
[[ -f $doctest_dir/doctest/doctest.h ]] && inc+=(-I"$doctest_dir")
nv=(nvcc -std=c++20 -O2 -arch=sm_"$arch" -DMEMSAFE_TEST_DEVICE=1 -Xcompiler=-fno-math-errno "${inc[@]}")

prebuilt=${PREBUILT:-}
# A prebuilt program is used when it is there and every library it needs resolves here.
usable() { [[ -n $prebuilt && -x $prebuilt/$1 ]] && ! ldd "$prebuilt/$1" | grep -q 'not found'; }
if [[ -n $prebuilt ]]; then
  if usable memsafe_gpu_tests && "$prebuilt/memsafe_gpu_tests" --list-test-cases >/dev/null 2>>"$log"; then
    cp "$prebuilt"/memsafe_gpu_tests "$prebuilt"/memsafe_bench_cuda "$prebuilt"/fma_peak_cuda "$build"/ 2>>"$log"
    say "using the binaries prebuilt in $prebuilt"
  else
    say "the binaries in $prebuilt do not start here: building them"
    prebuilt=
  fi
fi

if [[ $phase == test || $phase == all ]]; then
  # The GPU test executable as tests/gpu/CMakeLists.txt builds it: the shared reference cases
  # compiled as CUDA with MEMSAFE_TEST_DEVICE, the GPU-only cases, doctest's main. One nvcc per file,
  # in parallel.
  srcs=(tests/test_distances.cpp tests/test_kernels.cpp tests/gpu/test_cuda.cu tests/main.cpp)
  build_tests() {
    local pids=() s o rc=0
    for s in "${srcs[@]}"; do
      o="$build/$(basename "$s").o"
      if [[ $s == tests/main.cpp ]]; then g++ -std=c++20 -O2 "${inc[@]}" -c "$s" -o "$o" & else "${nv[@]}" -x cu -c "$s" -o "$o" & fi
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    ((rc == 0)) && nvcc -arch=sm_"$arch" "$build"/*.o -o "$build/memsafe_gpu_tests" -lcublas
  }
  run_cases() {
    local t=$build/memsafe_gpu_tests n i rc=0 c t0 names
    # The names once, in the order --first/--last count them.
    mapfile -t names < <("$t" --list-test-cases --order-by=name 2>/dev/null | grep -v '^\[doctest\]\|^====')
    n=${#names[@]}
    ((n > 0)) || { echo "cannot list the test cases"; return 1; }
    : > "$out/gpu_tests.log"
    for ((i = 1; i <= n; i++)); do
      t0=$SECONDS
      timeout "${CASE_TIMEOUT:-60}" "$t" --order-by=name --first=$i --last=$i --duration=true > "$build/case.log" 2>&1
      c=$?
      printf '%-4s %3d s  case %d: %s\n' "$([[ $c == 0 ]] && echo ok || echo FAIL:$c)" $((SECONDS - t0)) $i "${names[i - 1]}" >> "$out/gpu_tests.log"
      if [[ $c != 0 ]]; then rc=1; sed 's/^/    /' "$build/case.log" | tail -60 >> "$out/gpu_tests.log"; fi
    done
    grep -c '^ok' "$out/gpu_tests.log" | sed 's/$/ cases passed/'; grep '^FAIL' "$out/gpu_tests.log"
    return $rc
  }
  if [[ -n $prebuilt ]] || step build_tests build_tests; then
    step gpu_tests run_cases
    # The distributed GPU tests (two ranks sharing the GPU) where MPI is installed; NCCL's where found.
    if [[ ${MPI_TESTS:-1} == 0 ]]; then
      say "MPI_TESTS=0: the distributed GPU tests are skipped"
    elif command -v mpicxx >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then
      mpi_tests() {
        local flags=($(mpicxx --showme:compile)) links=($(mpicxx --showme:link | sed 's/-Wl,/-Xlinker /g; s/-pthread//g')) rc=0
        local run=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout "$step_timeout" mpirun
                   --allow-run-as-root --oversubscribe -np 2)
        # Prebuilt MPI programs only where they resolve against this machine's MPI, else built here.
        if usable memsafe_gpu_mpi_tests; then cp "$prebuilt/memsafe_gpu_mpi_tests" "$build/"
        else "${nv[@]}" "${flags[@]}" -x cu tests/gpu/test_mpi_cuda.cu -o "$build/memsafe_gpu_mpi_tests" -lcublas "${links[@]}" || return 1
        fi
        "${run[@]}" "$build/memsafe_gpu_mpi_tests" || rc=1
        local nccl_inc= c
        for c in /usr/local/cuda/include /usr/include /usr/local/include $(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "include"))' 2>/dev/null); do
          [[ -f $c/nccl.h ]] && { nccl_inc=$c; break; }
        done
        if [[ ${NCCL_TESTS:-1} == 0 ]]; then
          echo "NCCL_TESTS=0: the NCCL tests are skipped"
        elif [[ -n $nccl_inc ]]; then
          if usable memsafe_gpu_nccl_tests; then cp "$prebuilt/memsafe_gpu_nccl_tests" "$build/"
          else "${nv[@]}" "${flags[@]}" -I"$nccl_inc" -x cu tests/gpu/test_mpi_nccl.cu -o "$build/memsafe_gpu_nccl_tests" \
                 -lcublas -lnccl "${links[@]}" || return 1
          fi
          "${run[@]}" "$build/memsafe_gpu_nccl_tests" || rc=1
        else
          echo "no nccl.h found: the NCCL tests are skipped"
        fi
        return $rc
      }
      step gpu_mpi_tests mpi_tests
    else
      say "no MPI here: the distributed GPU tests are skipped"
    fi
    cases=${SANITIZE_CASES:-*cuBLAS only screens*,*block sort*,*streamed through the budget*,*default stream*,*pending*,*handles are reused*,*symmetric_product*}
    for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
      extra=()
      tool_cases=SANITIZE_CASES_$tool
      tool_cases=${!tool_cases:-$cases}
      # The cases provoke CUDA API errors on purpose (a full GPU, an error left pending): the tests
      # check those; the sanitizer reports only what the kernels and the library do wrong.
      [[ $tool == memcheck ]] && extra=(--leak-check full --report-api-errors no)
      step_timeout=${SANITIZE_TIMEOUT:-$step_timeout} step "sanitizer_$tool" bash -c "echo '== compute-sanitizer --tool $tool -tc=$tool_cases' >> '$out/sanitizer.log'; \
        compute-sanitizer --tool $tool ${extra[*]} --error-exitcode 3 '$build/memsafe_gpu_tests' -tc='$tool_cases' \
        >> '$out/sanitizer.log' 2>&1; rc=\$?; tail -5 '$out/sanitizer.log'; exit \$rc"
    done
  fi
fi

if [[ $phase == bench || $phase == all ]]; then
  bin_env=()
  [[ -n $prebuilt ]] && bin_env=(BIN_DIR="$build")
  step_timeout=${BENCH_TIMEOUT:-3600} step gpu_bench env "${bin_env[@]}" BUILD_DIR=build/gpu_bench CUDA_ARCH="$arch" bash bench/gpu/run_gpu.sh ${BENCH_ARGS:-}
  # Each suite's rows of this run (the files' last lines are this run's) in its own file, as in bench/results/.
  for f in bench/results/gpu_*.jsonl; do cp "$f" "$out/" 2>/dev/null; done
  # This run's rows in one short table (the call's output ends with it).
  python3 - bench/results/gpu_*.jsonl <<'EOF' | tee -a "$log"
import json, sys
rows = [json.loads(l) for f in sys.argv[1:] for l in open(f) if l.strip()]
last = max((r.get("run_id", "") for r in rows), default="")
for r in rows:
    if r.get("run_id") != last or r.get("suite") == "gpu_peak":
        continue
    chk = ";".join(f"{k[3:]}:{v.get('exact_sets', v.get('max_rel_diff', ''))}" for k, v in (r.get("check") or {}).items()
                   if isinstance(v, dict))
    t = r.get("median_s")
    print(f"{r['bench']:6s} {r.get('metric', ''):6s} n={r['n']:<8d} d={r['d']:<3d} {r['precision']} {r['impl']:17s} "
          f"{(f'{t * 1e3:10.3f} ms' if t else '        --   ')} {r.get('status', '')} {chk}")
EOF
  cp docs/benchmarks.md "$out/benchmarks.md" 2>/dev/null
fi
say "done: phase $phase, status $status; files in $out: $(ls "$out" | tr '\n' ' ')"
exit $status
