#!/usr/bin/env bash
# What a consumer's default flags cost: four small programs (bench/default_flags/kv.cpp: fused K·v
# for the RBF and Matérn kernels, f32 and f64; grad.cpp: the VJP of an RBF / Matérn-3/2 K·v with
# respect to X; sgpr.cpp: a gp::sgpr bound + gradient; attention.cpp: an attention layer's forward
# and backward, f32 and f64)
# compiled as a consumer compiles by default (g++ -O2, no -march: "default") and as this project
# compiles (-O3 -march=native -fno-math-errno: "native"), run one thread each, the two builds
# alternating in every round. One JSON line per (workload, build) appended to
# bench/results/default_flags.jsonl: every round's best-of-3 time, their min and median.
#   bash bench/default_flags.sh [ROUNDS]          (default 3; ≈ 2 minutes a round on a 2-core Zen 3)
#   BASE_REV=<rev> bash bench/default_flags.sh    also the default build of <rev>'s headers ("default@<rev>"),
#                                                 in the same rounds: before / after a change
# Environment: KV_N (20000), KV_D (3), GRAD_N (10000), GRAD_D (3), SGPR_N (20000), SGPR_M (1000),
# SGPR_D (8), ATT_T (2048), ATT_H (2: heads, d = 64), OUT, CXX (g++), BLAS_LIBS (-lopenblas -llapack: what the sgpr program links; LAPACK is needed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
R=${1:-3}
OUT=${OUT:-bench/results/default_flags.jsonl}
CXX=${CXX:-g++}
read -r -a blas <<< "${BLAS_LIBS:--lopenblas -llapack}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
declare -A flags=([default]="-O2" [native]="-O3 -march=native -fno-math-errno")
declare -A incs=([default]=include [native]=include)
builds=(default native)
if [[ -n ${BASE_REV:-} ]]; then
  base="default@$(git rev-parse --short "$BASE_REV")"
  mkdir -p "$tmp/base"
  git archive "$BASE_REV" include | tar -x -C "$tmp/base"
  flags[$base]="-O2"
  incs[$base]="$tmp/base/include"
  builds+=("$base")
fi
for b in "${builds[@]}"; do
  read -r -a f <<< "${flags[$b]}"
  "$CXX" -std=c++20 "${f[@]}" -I"${incs[$b]}" bench/default_flags/kv.cpp -o "$tmp/kv_$b" -lpthread
  "$CXX" -std=c++20 "${f[@]}" -I"${incs[$b]}" bench/default_flags/grad.cpp -o "$tmp/grad_$b" -lpthread
  "$CXX" -std=c++20 "${f[@]}" -I"${incs[$b]}" bench/default_flags/attention.cpp -o "$tmp/attention_$b" -lpthread
  "$CXX" -std=c++20 "${f[@]}" -DMEMSAFE_HAS_LAPACK=1 -I"${incs[$b]}" bench/default_flags/sgpr.cpp -o "$tmp/sgpr_$b" \
    "${blas[@]}" -lpthread
done
for _ in $(seq "$R"); do
  for b in "${builds[@]}"; do
    OPENBLAS_NUM_THREADS=1 "$tmp/kv_$b" "${KV_N:-20000}" "${KV_D:-3}" 3 | sed "s/^{/{\"build\": \"$b\", /" >> "$tmp/raw"
    "$tmp/grad_$b" "${GRAD_N:-10000}" "${GRAD_D:-3}" 3 | sed "s/^{/{\"build\": \"$b\", /" >> "$tmp/raw"
    "$tmp/attention_$b" "${ATT_T:-2048}" "${ATT_H:-2}" 3 | sed "s/^{/{\"build\": \"$b\", /" >> "$tmp/raw"
    OPENBLAS_NUM_THREADS=1 "$tmp/sgpr_$b" "${SGPR_N:-20000}" "${SGPR_M:-1000}" "${SGPR_D:-8}" 3 |
      sed "s/^{/{\"build\": \"$b\", /" >> "$tmp/raw"
  done
done
mkdir -p "$(dirname "$OUT")"
python3 - "$tmp/raw" "$OUT" "$R" "${BASE_REV:+BASE_REV=$BASE_REV }bash bench/default_flags.sh $R" <<'PY'
import datetime, json, statistics, subprocess, sys
raw, out, rounds, cmd = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
fam = {l.split(":")[0].strip(): l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if ":" in l}
host_cpu = f"{cpu} (family {fam.get('cpu family', '?')}, model {fam.get('model', '?')})"
simd = " ".join(x for x in ("avx2", "fma", "avx512f") if x in fam.get("flags", "").split())
try:
    rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip():
        rev += "-dirty"  # the headers measured are the working tree's, not HEAD's
except OSError:
    rev = ""
load = open("/proc/loadavg").read().split()[0]
groups = {}
for line in open(raw):
    r = json.loads(line)
    key = (r["bench"], r["kernel"], r["precision"], r["build"])
    groups.setdefault(key, []).append(r)
stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
with open(out, "a") as f:
    for key, rs in groups.items():
        row = {k: v for k, v in rs[-1].items() if k not in ("seconds",)}
        times = [r["seconds"] for r in rs]
        row.update({"suite": "default_flags", "times_s": times, "min_s": min(times), "median_s": statistics.median(times),
                    "rounds": len(times), "host_cpu": host_cpu, "host_simd": simd, "load_1m": float(load),
                    "timestamp": stamp, "git_rev": rev, "cmd": cmd, "status": "ok"})
        f.write(json.dumps(row) + "\n")
        print(json.dumps({k: row[k] for k in ("bench", "kernel", "precision", "build", "min_s", "median_s")}))
PY
