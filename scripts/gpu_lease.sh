#!/usr/bin/env bash
# One short GPU lease in one call, against a deadline: the steps that matter most first, each with
# its own time limit, each skipped when too little time is left. Prepared on a machine without a GPU
# (programs built there with nvcc and carried), run on the GPU machine as
#
#   DEADLINE=560 FOCUS='symmetric K(X*' bash scripts/gpu_lease.sh
#
# Steps (logs and JSON under OUT, default $OUT or gpu_out/):
#   1. device      nvidia-smi
#   2. focus       the test cases matching FOCUS (doctest -tc; no commas), in one process
#   3. tests       every other GPU test case, in one process
#   4. memcheck    compute-sanitizer memcheck on the SAN_FOCUS cases (default FOCUS)
#   5. ab          bench/gpu/ab.sh: AB_ROUNDS rounds of AB_WORKLOADS (';'-separated) by each program
#                  of AB_PROGRAMS (' '-separated paths; a program may be a wrapper setting variables)
#   5b. mpi        the distributed GPU tests on 2 ranks (the carried memsafe_gpu_mpi_tests, or built
#                  here where it does not find this machine's MPI); MPI_TESTS=0 skips them
#   6. peers       bench/gpu/run_gpu.py PEER_ARGS (default: the matvec suite, memsafe-cuda and KeOps;
#                  several invocations separated by ';'), rows to OUT/res/
#   7. racecheck, synccheck on the SAN_FOCUS cases
# At the end every step's log is gathered into OUT/steps.log (a lease returns at most 8 files).
# Programs come from BIN (default .carry/bin: memsafe_gpu_tests, memsafe_bench_cuda); Python wheels
# from .whl/ are installed into /tmp/site first. MEMSAFE_GIT_REV names the code's revision.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-gpu_out}
mkdir -p "$out/res"
bin=${BIN:-.carry/bin}
deadline=${DEADLINE:-560}
focus=${FOCUS:-}
san=${SAN_FOCUS:-$focus}
t_start=$SECONDS
log="$out/lease.log"
export PYTHONUNBUFFERED=1

say() { echo "[lease +$((SECONDS - t_start))s] $*" | tee -a "$log"; }
# step NAME LIMIT CMD...: runs CMD under min(LIMIT, time left), its output to OUT/NAME.log.
step() {
  local name=$1 limit=$2 left rc
  shift 2
  left=$((deadline - (SECONDS - t_start)))
  if ((left < 15)); then say "skip $name: ${left}s left"; return 0; fi
  ((limit > left)) && limit=$left
  say "start $name (limit ${limit}s)"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  say "end $name: exit $rc; $(tail -2 "$out/$name.log" | tr '\n' ' ' | cut -c1-300)"
  return 0
}

# sanitize TOOL LIMIT [OPTION...]: compute-sanitizer's TOOL on the SAN_FOCUS cases, as step TOOL.
sanitize() {
  local tool=$1 limit=$2
  shift 2
  step "$tool" "$limit" compute-sanitizer --tool "$tool" "$@" --error-exitcode 3 "$t" -tc="$san"
}
steps=(device focus tests memcheck mpi ab peers racecheck synccheck)  # every step's log, in order

step device 20 nvidia-smi
shopt -s nullglob
wheels=(.whl/*.whl)
if ((${#wheels[@]})); then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}" \
    >>"$log" 2>&1 && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
t=$bin/memsafe_gpu_tests
if [[ -n $focus ]]; then
  step focus "${FOCUS_LIMIT:-90}" "$t" -tc="$focus" --duration=true
  step tests "${TESTS_LIMIT:-200}" "$t" -tce="$focus" --duration=true
  sanitize memcheck "${MEMCHECK_LIMIT:-75}" --leak-check full --report-api-errors no
else
  step tests "${TESTS_LIMIT:-240}" "$t" --duration=true
fi
# The distributed GPU tests (two ranks sharing the GPU), when the carried program finds this
# machine's MPI, else built here with its mpicxx's flags (within the step's limit).
mpi_tests() {
  local p=$bin/memsafe_gpu_mpi_tests
  if [[ ! -x $p ]] || ldd "$p" | grep -q 'not found'; then
    echo "building memsafe_gpu_mpi_tests here (the carried one does not start: $(ldd "$p" 2>&1 | grep 'not found' | head -2 | tr '\n' ' '))"
    local inc=(-Iinclude -Itests) flags links
    [[ -f .carry/doctest/doctest/doctest.h ]] && inc+=(-I.carry/doctest)
    read -r -a flags <<<"$(mpicxx --showme:compile)"
    read -r -a links <<<"$(mpicxx --showme:link | sed 's/-Wl,/-Xlinker /g; s/-pthread//g')"
    p=/tmp/memsafe_gpu_mpi_tests
    nvcc -std=c++20 -O2 -arch=sm_90 -Xcompiler=-fno-math-errno "${inc[@]}" "${flags[@]}" -x cu tests/gpu/test_mpi_cuda.cu \
      -o "$p" -lcublas "${links[@]}" || return 1
  fi
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout "${MPI_RUN_LIMIT:-80}" mpirun --allow-run-as-root --oversubscribe --bind-to none \
    -np 2 "$p"
}
if [[ ${MPI_TESTS:-1} != 0 ]] && command -v mpirun >/dev/null 2>&1; then
  export -f mpi_tests
  export bin
  step mpi "${MPI_LIMIT:-90}" bash -c mpi_tests
fi
if [[ -n ${AB_WORKLOADS:-} && -n ${AB_PROGRAMS:-} ]]; then
  IFS=';' read -r -a works <<<"$AB_WORKLOADS"
  read -r -a progs <<<"$AB_PROGRAMS"
  step ab "${AB_LIMIT:-120}" bash bench/gpu/ab.sh "${AB_ROUNDS:-2}" "${works[@]}" -- "${progs[@]}"
fi
# PEER_ARGS: one run_gpu.py invocation's arguments, or several separated by ';' (run in turn, one step).
peers() {
  local a rc=0
  IFS=';' read -r -a runs <<<"${PEER_ARGS:-matvec --impls memsafe-cuda,keops}"
  for a in "${runs[@]}"; do
    # shellcheck disable=SC2086  # each run is a list of arguments
    python3 bench/gpu/run_gpu.py $a --bin "$bin/memsafe_bench_cuda" --out "$out/res" || rc=1
  done
  return $rc
}
export -f peers
export bin out PEER_ARGS
step peers "${PEERS_LIMIT:-200}" bash -c peers
if [[ -n $focus ]]; then
  sanitize racecheck "${RACECHECK_LIMIT:-45}"
  sanitize synccheck "${SYNCCHECK_LIMIT:-30}"
fi
say "done"
# The short table the call's reply ends with.
for f in focus tests memcheck mpi racecheck synccheck; do
  [[ -f $out/$f.log ]] && echo "$f: $(grep -E 'test cases:|ERROR SUMMARY|RACECHECK SUMMARY|assertions:' "$out/$f.log" | tr '\n' ' ')"
done
[[ -f $out/ab.log ]] && cat "$out/ab.log"
for f in "${steps[@]}"; do
  [[ -f $out/$f.log ]] && { echo "===== $f"; cat "$out/$f.log"; rm -f "$out/$f.log"; }
done >"$out/steps.log"
exit 0
