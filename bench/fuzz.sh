#!/usr/bin/env bash
# A long fuzz run: the doctest case "fuzz: random expressions against a dense reference"
# (tests/test_fuzz.cpp) for SECONDS seconds of cases from SEED. Prints one JSON line on stdout:
#   {"bench": "fuzz", "cases": ..., "seconds": ..., "seed": ..., "failures": ..., "evaluations": ...,
#    "checked": ..., "ambiguous": ..., "expected_errors": ..., "rejected": ..., "cpu": ..., "status": ...}
# doctest's report (each failing case with its description and how to rerun it) and a table of
# cases, failures and checked / ambiguous values per slot go to stderr.
#   bash bench/fuzz.sh [SECONDS] [SEED]        (defaults: 300 s, the test's fixed seed)
#   BIN=path/to/memsafe_tests bash bench/fuzz.sh 60 7
# BIN defaults to build/tests/memsafe_tests (configured and built first when missing).
# MEMSAFE_FUZZ_MAX_REPORTS (default here 20) limits the failing cases reported in detail.
# Exit status: 0 when no case failed, 1 when some did, 2 when the run produced no summary.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=${1:-300}
seed=${2:-}
BIN=${BIN:-build/tests/memsafe_tests}
if [[ ! -x $BIN ]]; then
  cmake -S . -B build >&2
  cmake --build build --target memsafe_tests -j"$(nproc)" >&2
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
env MEMSAFE_FUZZ_SECONDS="$secs" ${seed:+MEMSAFE_FUZZ_SEED="$seed"} MEMSAFE_FUZZ_SUMMARY=1 MEMSAFE_FUZZ_SLOTS=1 \
  MEMSAFE_FUZZ_MAX_REPORTS="${MEMSAFE_FUZZ_MAX_REPORTS:-20}" \
  "$BIN" -tc='fuzz: random*' >"$log" 2>&1 || status=$?
grep -v '^MEMSAFE_FUZZ_SUMMARY ' "$log" >&2 || true
summary=$(grep -m1 '^MEMSAFE_FUZZ_SUMMARY ' "$log" | sed 's/^MEMSAFE_FUZZ_SUMMARY {//') || true
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | xargs || true)
if [[ -z $summary ]]; then
  printf '{"bench": "fuzz", "status": "error", "message": "no summary from %s (exit status %s)", "cpu": "%s"}\n' "$BIN" "$status" "$cpu"
  exit 2
fi
result=$([[ $status == 0 ]] && echo ok || echo failures)
printf '{"bench": "fuzz", %s' "${summary%\}}"
printf ', "cpu": "%s", "status": "%s"}\n' "$cpu" "$result"
[[ $status == 0 ]] || exit 1
