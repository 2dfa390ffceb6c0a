#!/usr/bin/env bash
# OpenBLAS's kernel set under memsafe's SGPR bound and gradient: sgpr_train --bench (no training: the
# bound, and the bound with its gradient, timed at the initial point) with OPENBLAS_CORETYPE set to
# each of CORES in turn, ROUNDS alternating rounds, one JSON line per run appended to
# bench/results/gp_blas_core.jsonl (sgpr_train's line, with the request as openblas_coretype and the
# set that ran as blas_core). The n-sized SYRK and GEMMs and the m×m factorisations are OpenBLAS's,
# the kernel evaluations memsafe's own (dispatched by memsafe, the same in every run).
#
#   bash bench/gp/blas_core_ab.sh
#   CORES="Haswell unset" DATASET=protein M=5000 ROUNDS=2 bash bench/gp/blas_core_ab.sh
#
# Environment: BIN (build/examples/sgpr_train), DATASET (elevators), SPLIT (0), M (2000), REPEATS
# (evaluations timed per run, --bench; 3), ROUNDS (3), CORES ("Haswell SkylakeX unset"; unset: OpenBLAS's
# own choice for the CPU), THREADS (2), BUDGET (64MiB), OUT (bench/results/gp_blas_core.jsonl).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BIN=${BIN:-build/examples/sgpr_train}
DATASET=${DATASET:-elevators}
SPLIT=${SPLIT:-0}
M=${M:-2000}
REPEATS=${REPEATS:-3}
ROUNDS=${ROUNDS:-3}
CORES=${CORES:-"Haswell SkylakeX unset"}
THREADS=${THREADS:-2}
BUDGET=${BUDGET:-64MiB}
OUT=${OUT:-bench/results/gp_blas_core.jsonl}
[[ -x $BIN ]] || { echo "blas_core_ab.sh: $BIN not built (cmake --build build --target sgpr_train)" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
for ((round = 0; round < ROUNDS; ++round)); do
  for core in $CORES; do
    envs=(OPENBLAS_NUM_THREADS="$THREADS")
    if [[ $core == unset ]]; then envs=(-u OPENBLAS_CORETYPE "${envs[@]}"); else envs+=(OPENBLAS_CORETYPE="$core"); fi
    cmd=("$BIN" --dataset "$DATASET" --split "$SPLIT" --m "$M" --bench "$REPEATS" --budget "$BUDGET" --threads "$THREADS")
    echo "blas_core_ab.sh: round $round, OPENBLAS_CORETYPE=$core: ${cmd[*]}" >&2
    load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo null)
    line=$(env "${envs[@]}" "${cmd[@]}" 2>/dev/null | tail -n 1)
    [[ -n $line ]] || line='{"status": "no output"}'
    python3 -c 'import json,sys,datetime; sys.path.insert(0, "bench"); from bench_common import cpu_model
r=json.loads(sys.argv[1]); r["openblas_coretype"]=sys.argv[2]; r["round"]=int(sys.argv[3]); r["cmd"]=sys.argv[4]
r["load_1m"]=float(sys.argv[5]) if sys.argv[5] != "null" else None; r["suite"]="blas_core_ab"
r.setdefault("status", "ok" if r.get("seconds_bound_grad_min") is not None else "error"); r["host_cpu"]=cpu_model()
r["timestamp"]=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"); print(json.dumps(r))' \
      "$line" "$core" "$round" "${cmd[*]}" "$load" >> "$OUT"
  done
done
