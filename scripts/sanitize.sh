#!/usr/bin/env bash
# The host test suites under the compiler's sanitizers: memsafe_tests and memsafe_exact_gp_tests
# built with AddressSanitizer + UndefinedBehaviorSanitizer (`address`, the default) or with
# ThreadSanitizer (`thread`), then run, each in one process (so LeakSanitizer checks the whole run
# at exit). Any report fails the run: UB aborts at the first finding (-fno-sanitize-recover), ASan
# and TSan exit non-zero.
#   bash scripts/sanitize.sh [address|thread] [BUILD_DIR] [doctest options...]
#   bash scripts/sanitize.sh address /tmp/build-asan -tc='fuzz*'
# BUILD_DIR defaults to build-asan / build-tsan in the repository (ignored by git). The build is
# -O1 -g with the project's other flags (-march=native, -fno-math-errno); no CUDA, examples or
# benchmarks. OpenBLAS runs on one thread: its own threads are not instrumented (TSan would report
# its hand-made synchronisation) and the library's threads are what is under test.
# MEMSAFE_FUZZ_SECONDS (default here 60) bounds the fuzz case; SANITIZE_JOBS the build's -j.
# On two Zen 3 cores: address 27 minutes to build and 4 to run; thread 21 minutes in all.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mode=${1:-address}
case $mode in
  address) sanitizers=address,undefined; extra=-fno-sanitize-recover=undefined ;;
  thread) sanitizers=thread; extra= ;;
  *) echo "usage: bash scripts/sanitize.sh [address|thread] [BUILD_DIR] [doctest options...]" >&2; exit 2 ;;
esac
shift || true
dir=${1:-build-${mode:0:1}san}
shift || true
bash scripts/deps.sh >/dev/null
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
  -DCMAKE_CXX_FLAGS="-fsanitize=$sanitizers -fno-omit-frame-pointer${extra:+ $extra}" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=$sanitizers" \
  -DMEMSAFE_CUDA=OFF -DMEMSAFE_BUILD_EXAMPLES=OFF -DMEMSAFE_BUILD_BENCH=OFF \
  -DMEMSAFE_BUILD_PRECOMPILED=OFF >/dev/null
targets=(memsafe_tests)
help=$(cmake --build "$dir" --target help)  # memsafe_exact_gp_tests exists where LAPACK was found
[[ $help == *" memsafe_exact_gp_tests"* ]] && targets+=(memsafe_exact_gp_tests)
cmake --build "$dir" --target "${targets[@]}" -j"${SANITIZE_JOBS:-$(nproc)}"
export OPENBLAS_NUM_THREADS=1 MEMSAFE_FUZZ_SECONDS=${MEMSAFE_FUZZ_SECONDS:-60}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
# The data sets where the build's configuration found them (ctest passes the same).
MEMSAFE_DATA_DIR=${MEMSAFE_DATA_DIR:-$(sed -n 's/^MEMSAFE_DATA_DIR:[A-Z]*=//p' "$dir/CMakeCache.txt")}
export MEMSAFE_DATA_DIR
status=0
for t in "${targets[@]}"; do
  echo "== $mode: $t" >&2
  "$dir/tests/$t" "$@" || status=1
done
exit $status
