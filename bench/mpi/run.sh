#!/usr/bin/env bash
# Distributed evaluation on one machine: 1 and 2 ranks × 1 thread against 1 process × 2 threads,
# kNN (n = 10^6, m = 1000, k = 10, d = 3 and 100), an RBF matvec (n = 10^6, m = 1000, d = 3) and
# kNN with the queries sharded too (knn_both: shard_both, the database travelling around the ring),
# all in one run (ratios compare only within a run). JSON lines to bench/results/mpi.jsonl.
# Then the SGPR bound + gradient (mpi::sgpr: n = 10^5 random points, d = 9, m = 500, Matérn 3/2) in
# the same three configurations, to bench/results/mpi_sgpr.jsonl (needs memsafe::lapack).
#   bash bench/mpi/run.sh [build dir (default build)] [reps (default 3)] [all|sgpr (default all)]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build}
reps=${2:-3}
which=${3:-all}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
# Runs one configuration and appends its JSON line, with the machine's state, to $2.
measure() {
  local np=$1 out=$2
  shift 2
  local load stamp rev line
  load=$(cut -d' ' -f1 /proc/loadavg)
  stamp=$(date -u +%Y-%m-%dT%H:%M:%S+00:00)
  rev=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  line=$(mpirun --oversubscribe --bind-to none -np "$np" "$@")
  echo "${line%\}}, \"cpu\": \"$cpu\", \"loadavg_1m\": $load, \"timestamp\": \"$stamp\", \"git_rev\": \"$rev\"}" | tee -a "$out"
}
if [[ $which == all ]]; then
  exe=$build/bench/memsafe_mpi_bench
  [[ -x $exe ]] || cmake --build "$build" --target memsafe_mpi_bench
  out=bench/results/mpi.jsonl
  : > "$out"
  for spec in "knn 3" "knn 100" "matvec 3" "knn_both 3"; do
    set -- $spec
    for cfg in "1 2" "1 1" "2 1"; do
      read -r np th <<< "$cfg"
      measure "$np" "$out" "$exe" --task "$1" --d "$2" --threads "$th" --reps "$reps"
    done
  done
fi
exe=$build/bench/memsafe_mpi_sgpr_bench
[[ -x $exe ]] || cmake --build "$build" --target memsafe_mpi_sgpr_bench || true
if [[ -x $exe ]]; then
  out=bench/results/mpi_sgpr.jsonl
  : > "$out"
  for cfg in "1 2" "1 1" "2 1"; do
    read -r np th <<< "$cfg"
    measure "$np" "$out" "$exe" --n 100000 --m 500 --d 9 --threads "$th" --reps "$reps"
  done
else
  echo "memsafe_mpi_sgpr_bench not built (needs memsafe::lapack): no SGPR rows" >&2
fi
