#!/usr/bin/env bash
# Same-call A/B of memsafe_bench_cuda builds on a machine with an NVIDIA GPU: each workload is run by
# every program in turn, for ROUNDS rounds (alternating, so drift hits all alike), and one line per
# run gives the median and minimum of 5 timed calls and the planned temporaries.
#
#   bash bench/gpu/ab.sh ROUNDS 'WORKLOAD' ['WORKLOAD' ...] -- PROGRAM [PROGRAM ...]
#   bash bench/gpu/ab.sh 2 'matvec --n 1000000 --d 3' 'knn --n 1000000 --m 10000 --d 3 --k 10' \
#        -- .carry/v1/memsafe_bench_cuda .carry/v3/memsafe_bench_cuda
#
# A workload is memsafe_bench_cuda's arguments; --reps 5 --warmup 1 are added (later ones win).
# Build the variants on any machine with nvcc (`nvcc -std=c++20 -O3 -arch=sm_90 -Iinclude
# bench/gpu/memsafe_bench_cuda.cu -lcublas -o DIR/memsafe_bench_cuda`) and carry them.
set -uo pipefail
rounds=${1:?rounds}; shift
works=()
while (($#)) && [[ $1 != -- ]]; do works+=("$1"); shift; done
[[ ${1:-} == -- ]] || { echo "usage: ab.sh ROUNDS WORKLOAD... -- PROGRAM..." >&2; exit 2; }
shift
progs=("$@")
((${#progs[@]})) || { echo "ab.sh: no programs" >&2; exit 2; }
for ((r = 1; r <= rounds; r++)); do
  for w in "${works[@]}"; do
    for p in "${progs[@]}"; do
      # shellcheck disable=SC2086  # the workload is a list of arguments
      out=$(timeout 120 "$p" $w --reps 5 --warmup 1 2>/dev/null | tail -1)
      python3 -c '
import json, sys
tag = sys.argv[1]
try:
    r = json.loads(sys.argv[2])
except ValueError:
    print(tag, "no JSON line"); sys.exit()
if "median_s" not in r:
    print(tag, r.get("status"), r.get("message", "")); sys.exit()
print(tag, "median %.3f ms, min %.3f ms," % (r["median_s"] * 1e3, r["min_s"] * 1e3), r.get("status"),
      "temp %.1f MiB" % (r.get("planned_temp_bytes", 0) / 2**20))' "round $r | $w | $p:" "$out"
    done
  done
done
