#!/usr/bin/env bash
# Compare two revisions of memsafe back to back on this machine: the same memsafe_bench workloads
# (kNN l2/l1/cosine and the matvec3 kernel matvec), old and new processes alternating, their result
# dumps compared byte for byte, and the compile time of the same translation units.
#
#   bash bench/compare_revs.sh OLD_REV [NEW_REV] [ROUNDS]
#     OLD_REV, NEW_REV   git revisions (NEW_REV default: the working tree as committed, HEAD)
#     ROUNDS             alternating old/new processes per workload (default 5)
#
# Prints one JSON line per workload: min and median seconds of each side, new/old ratios, and
# whether the dumps (the first ≤ 2000 rows of kNN indices / matvec entries) are identical; then one
# line per (revision, translation unit, compiler) from bench/compile_time.sh. Exit status 1 when a
# dump differs. Builds go to $WORK (default /tmp/memsafe-compare), one git worktree per revision;
# CT_RUNS compile-time runs per translation unit (default 3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OLD=${1:?usage: compare_revs.sh OLD_REV [NEW_REV] [ROUNDS]}
NEW=${2:-HEAD}
ROUNDS=${3:-5}
WORK=${WORK:-/tmp/memsafe-compare}
mkdir -p "$WORK"
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

build() {  # rev -> path of memsafe_bench
  local rev sha dir
  rev=$1
  sha=$(git rev-parse --short "$rev")
  dir="$WORK/$sha"
  if [ ! -d "$dir/src" ]; then
    git worktree add --detach -f "$dir/src" "$sha" >/dev/null 2>&1
  fi
  cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DMEMSAFE_CUDA=OFF "${launcher[@]}" >/dev/null
  cmake --build "$dir/build" --target memsafe_bench -j"$(nproc)" >/dev/null
  echo "$dir"
}

old_dir=$(build "$OLD")
new_dir=$(build "$NEW")
old_bin="$old_dir/build/bench/memsafe_bench"
new_bin="$new_dir/build/bench/memsafe_bench"

# The knn suite's metrics and dimensions at n = 10^5 database points, m = 2000 queries (the full
# suite takes hours here), and the matvec3 suite's workload (RBF, d = 3, f32, n = 10^5).
workloads=(
  "knn --data random --metric l2 --n 100000 --m 2000 --d 3 --k 10"
  "knn --data random --metric l2 --n 100000 --m 2000 --d 100 --k 10"
  "knn --data random --metric l1 --n 100000 --m 2000 --d 10 --k 10"
  "knn --data random --metric cosine --n 100000 --m 2000 --d 10 --k 10"
  "matvec --n 100000 --d 3 --lengthscale 1"
)
common="--impl memsafe --precision f32 --budget 64MiB --threads 0 --reps 1 --warmup 1 --seed 42"
status=0
for w in "${workloads[@]}"; do
  old_t=() new_t=()
  for r in $(seq "$ROUNDS"); do
    # shellcheck disable=SC2086
    o=$("$old_bin" $w $common --dump "$WORK/old.dump")
    # shellcheck disable=SC2086
    n=$("$new_bin" $w $common --dump "$WORK/new.dump")
    old_t+=("$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["min_s"])' "$o")")
    new_t+=("$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["min_s"])' "$n")")
  done
  same=true
  cmp -s "$WORK/old.dump" "$WORK/new.dump" || { same=false; status=1; }
  python3 - "$w" "$same" "${old_t[*]}" "${new_t[*]}" "$(git rev-parse --short "$OLD")" "$(git rev-parse --short "$NEW")" <<'EOF'
import json, statistics, sys
w, same, old, new, orev, nrev = sys.argv[1:]
old = [float(x) for x in old.split()]; new = [float(x) for x in new.split()]
print(json.dumps({"workload": w, "old_rev": orev, "new_rev": nrev, "rounds": len(old),
                  "old_min_s": min(old), "new_min_s": min(new), "old_median_s": statistics.median(old),
                  "new_median_s": statistics.median(new), "ratio_min": round(min(new) / min(old), 3),
                  "ratio_median": round(statistics.median(new) / statistics.median(old), 3),
                  "dump_identical": same == "true"}))
EOF
done

for side in "$OLD:$old_dir" "$NEW:$new_dir"; do
  rev=${side%%:*}
  dir=${side#*:}
  (cd "$dir/src" && bash bench/compile_time.sh "${CT_RUNS:-3}") | sed "s/^{/{\"rev\": \"$(git rev-parse --short "$rev")\", /"
done
exit $status
