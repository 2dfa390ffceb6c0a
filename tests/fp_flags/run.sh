#!/usr/bin/env bash
# config.fp_flags (tests/CMakeLists.txt): build main.cpp with clang++ three ways and check each
# answer: plain -O2 must print "ok" (right answers), -fno-honor-nans and -fassociative-math
# -fno-signed-zeros -fno-trapping-math must print "refused". Skipped (exit 77) without clang++.
# Usage: run.sh INCLUDE_DIR WORK_DIR
set -u
inc=$1 work=$2
clang=$(command -v clang++ || true)
if [[ -z $clang ]]; then
  echo "config.fp_flags: skipped: no clang++ on PATH (g++ defines macros for these flags; config.hpp refuses them)"
  exit 77
fi
mkdir -p "$work"
fail=0
check() {
  local want=$1; shift
  local exe="$work/fp_$RANDOM"
  if ! "$clang" -std=c++20 -O2 "$@" -I"$inc" "$(dirname "$0")/main.cpp" -o "$exe" -pthread; then
    echo "FAIL: clang++ $* did not compile"; fail=1; return
  fi
  local out
  out=$("$exe"); local rc=$?
  rm -f "$exe"
  echo "clang++ -O2 $*: $out"
  if [[ $rc -ne 0 || $out != "$want"* ]]; then echo "FAIL: expected '$want'"; fail=1; fi
}
check ok
check refused -fno-honor-nans
check refused -fassociative-math -fno-signed-zeros -fno-trapping-math
exit $fail
