#!/usr/bin/env bash
# Where the GPU time goes, on a machine with an NVIDIA GPU: every kernel of a few benchmark shapes
# timed by Nsight Compute (ncu, clocks left as they are), summed per kernel name, with the SM and
# memory throughput of the largest ones; and a KeOps smoke run with Python's fault handler (to see
# where a crashing peer dies). One text file: diag.log in OUT.
#
#   bash scripts/gpu_diag.sh [OUT]       # OUT default $OUT, else gpu_out/
# Environment: BIN (memsafe_bench_cuda; default build/gpu_session/memsafe_bench_cuda, where
# scripts/gpu_session.sh puts it), NCU_TIMEOUT (seconds per shape, default 90), SHAPES (which
# shapes, default "knn3 knn100 matvec l1"), KEOPS_SMOKE (0: no KeOps run).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-${OUT:-gpu_out}}
mkdir -p "$out"
log="$out/diag.log"
bin=${BIN:-build/gpu_session/memsafe_bench_cuda}
t=${NCU_TIMEOUT:-90}
metrics=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active

summarise() {  # ncu --csv output -> per kernel name: launches, total ms, mean SM % and DRAM %
  python3 - "$1" <<'EOF'
import csv, sys, collections
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"')))
agg = collections.defaultdict(lambda: {"n": 0, "ms": 0.0, "sm": 0.0, "dram": 0.0, "occ": 0.0})
ids = collections.defaultdict(dict)
for r in rows:
    ids[(r["ID"], r["Kernel Name"].split("(")[0][:90])][r["Metric Name"]] = float(r["Metric Value"].replace(",", "") or 0)
for (i, name), m in ids.items():
    a = agg[name]
    a["n"] += 1
    ms = m.get("gpu__time_duration.sum", 0) / 1e6  # ns
    a["ms"] += ms
    a["sm"] += m.get("sm__throughput.avg.pct_of_peak_sustained_elapsed", 0) * ms
    a["dram"] += m.get("dram__throughput.avg.pct_of_peak_sustained_elapsed", 0) * ms
    a["occ"] += m.get("sm__warps_active.avg.pct_of_peak_sustained_active", 0) * ms
tot = sum(a["ms"] for a in agg.values()) or 1
print(f"{'kernel':90s} {'launches':>8s} {'ms':>9s} {'share':>6s} {'SM%':>5s} {'DRAM%':>6s} {'warps%':>6s}")
for name, a in sorted(agg.items(), key=lambda kv: -kv[1]["ms"]):
    w = a["ms"] or 1
    print(f"{name:90s} {a['n']:8d} {a['ms']:9.3f} {a['ms']/tot:6.1%} {a['sm']/w:5.1f} {a['dram']/w:6.1f} {a['occ']/w:6.1f}")
print(f"total kernel time {tot:.3f} ms")
EOF
}

shapes=" ${SHAPES:-knn3 knn100 matvec l1} "
shape() {  # key, name, then memsafe_bench_cuda arguments
  local key=$1 name=$2; shift 2
  [[ $shapes == *" $key "* ]] || return 0
  echo "== $name: memsafe_bench_cuda $*" >> "$log"
  timeout "$t" ncu --clock-control none --csv --metrics "$metrics" "$bin" "$@" --reps 1 --warmup 0 \
    > "$out/ncu_raw.csv" 2>> "$log"
  echo "(ncu exit $?)" >> "$log"
  summarise "$out/ncu_raw.csv" >> "$log" 2>&1
  rm -f "$out/ncu_raw.csv"
}

: > "$log"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$log" 2>&1
if command -v ncu >/dev/null 2>&1 && [[ -x $bin ]]; then
  shape knn3 "kNN L2 d = 3 (fused)" knn --n 1000000 --m 10000 --d 3 --k 10 --metric l2 --precision f32 --budget 1GiB
  shape knn100 "kNN L2 d = 100 (cuBLAS screen + warp-list selection)" knn --n 100000 --m 10000 --d 100 --k 10 --metric l2 --precision f32 --budget 1GiB
  shape matvec "matvec RBF d = 3 f32 (fused)" matvec --n 200000 --d 3 --precision f32 --budget 1GiB
  shape l1 "kNN L1 d = 100 (semiring tile + warp-list selection)" knn --n 100000 --m 10000 --d 100 --k 10 --metric l1 --precision f32 --budget 1GiB
else
  echo "ncu or $bin missing: no kernel times" >> "$log"
fi

if [[ ${KEOPS_SMOKE:-1} != 0 ]]; then
  echo "== KeOps smoke run (python -X faulthandler)" >> "$log"
  timeout "$t" python3 -X faulthandler bench/gpu/peers/keops_gpu_bench.py knn --n 10000 --m 100 --d 3 --k 10 \
    --metric l2 --precision f32 --reps 1 >> "$log" 2>&1
  echo "(keops exit $?)" >> "$log"
fi
tail -40 "$log"
