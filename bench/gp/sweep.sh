#!/usr/bin/env bash
# Issue 14 item 5, memsafe's side: SGPR training (sgpr_train) on UCI sets, splits and numbers of
# inducing points, the same initialisation and L-BFGS iteration count for every run; one JSON line
# per run appended to bench/results/gp_sgpr.jsonl (the run's command line in "cmd").
#
#   bash bench/gp/sweep.sh                      # the full grid below: HOURS on 2 cores
#   DATASETS="kin40k" SPLITS="0" MS="500" ITERS=50 bash bench/gp/sweep.sh    # one run
#   IMPLS="memsafe gpflow" ...                  # GPflow's SGPR too, from the same start (gpflow_train.py)
#   IMPLS="memsafe gpflow gpytorch" ...         # and GPyTorch's (InducingPointKernel), the same start (gpytorch_train.py)
#
# Environment: BIN (default build/examples/sgpr_train), DATASETS (kin40k protein elevators bike),
# SPLITS (0 1 2), MS (500 1000 2000 5000 10000), ITERS (100), KERNEL (matern32), BUDGET (64MiB),
# THREADS (2), OUT (bench/results/gp_sgpr.jsonl), TIMEOUT seconds per run (36000; a run that passes
# it is recorded as {"status": "timeout"}), IMPLS (memsafe; add gpflow and/or gpytorch for the peers),
# GPFLOW_PY (the GPflow venv's python, bench/.cache/venv-gpflow/bin/python), GPYTORCH_PY (the GPyTorch
# venv's python, bench/.cache/venv-gpytorch/bin/python), TIME_LIMIT (memsafe and GPflow: sgpr_train's
# and gpflow_train.py's --time-limit, seconds after which training stops at the end of an iteration;
# the row's lbfgs_status then reads "time_limit" and the report marks it), BLAS_CORETYPE (memsafe only: the
# OpenBLAS kernel set its dense steps run on, as OPENBLAS_CORETYPE — an environment may force an older
# one, e.g. OPENBLAS_CORETYPE=Haswell: auto (default) is SkylakeX, OpenBLAS's AVX-512 kernels, on a CPU
# with AVX-512 F/BW/DQ/VL, else unset; unset is OpenBLAS's own choice; inherit keeps the environment's;
# a name sets it. The row records the request as openblas_coretype (null for inherit) and the set that
# ran as blas_core). Each run's row also records the machine's 1-minute load average at its start
# (load_1m): the machine may be shared.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BIN=${BIN:-build/examples/sgpr_train}
DATASETS=${DATASETS:-"kin40k protein elevators bike"}
SPLITS=${SPLITS:-"0 1 2"}
MS=${MS:-"500 1000 2000 5000 10000"}
ITERS=${ITERS:-100}
KERNEL=${KERNEL:-matern32}
BUDGET=${BUDGET:-64MiB}
THREADS=${THREADS:-2}
OUT=${OUT:-bench/results/gp_sgpr.jsonl}
TIMEOUT=${TIMEOUT:-36000}
TIME_LIMIT=${TIME_LIMIT:-}
BLAS_CORETYPE=${BLAS_CORETYPE:-auto}
if [[ $BLAS_CORETYPE == auto ]]; then  # the rule bench/run.py's --blas-coretype auto follows
  BLAS_CORETYPE=$(python3 -c 'import sys; sys.path.insert(0, "bench"); from bench_common import openblas_avx512_coretype as f
print(f() or "unset")')
fi
[[ -x $BIN ]] || { echo "sweep.sh: $BIN not built (cmake --build build --target sgpr_train; needs liblbfgs-dev)" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
IMPLS=${IMPLS:-memsafe}
GPFLOW_PY=${GPFLOW_PY:-bench/.cache/venv-gpflow/bin/python}
GPYTORCH_PY=${GPYTORCH_PY:-bench/.cache/venv-gpytorch/bin/python}
for ds in $DATASETS; do
  for s in $SPLITS; do
    for m in $MS; do
      for impl in $IMPLS; do
        if [[ $impl == gpflow ]]; then
          cmd=("$GPFLOW_PY" bench/gp/gpflow_train.py --dataset "$ds" --split "$s" --m "$m" --iters "$ITERS"
               --kernel "$KERNEL" --threads "$THREADS" --sgpr-train "$BIN" ${TIME_LIMIT:+--time-limit "$TIME_LIMIT"})
        elif [[ $impl == gpytorch ]]; then
          cmd=("$GPYTORCH_PY" bench/gp/gpytorch_train.py --dataset "$ds" --split "$s" --m "$m" --iters "$ITERS"
               --kernel "$KERNEL" --threads "$THREADS" --sgpr-train "$BIN")
        else
          cmd=("$BIN" --dataset "$ds" --split "$s" --m "$m" --iters "$ITERS" --kernel "$KERNEL" --budget "$BUDGET"
               --threads "$THREADS" ${TIME_LIMIT:+--time-limit "$TIME_LIMIT"})
        fi
        echo "sweep.sh: ${cmd[*]}" >&2
        load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo null)
        envs=(OPENBLAS_NUM_THREADS="$THREADS")
        coretype=inherit
        if [[ $impl == memsafe && $BLAS_CORETYPE != inherit ]]; then
          coretype=$BLAS_CORETYPE
          if [[ $coretype == unset ]]; then envs=(-u OPENBLAS_CORETYPE "${envs[@]}"); else envs+=(OPENBLAS_CORETYPE="$coretype"); fi
        fi
        line=$(env "${envs[@]}" timeout "$TIMEOUT" "${cmd[@]}" 2>>"${OUT%.jsonl}.log" | tail -n 1)
        rc=$?
        if [[ $rc -eq 124 ]]; then line="{\"status\": \"timeout\", \"dataset\": \"$ds\", \"split\": $s, \"m\": $m}"; fi
        [[ -n $line ]] || line="{\"status\": \"no output (exit $rc)\", \"dataset\": \"$ds\", \"split\": $s, \"m\": $m}"
        python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["cmd"]=sys.argv[2]; r["impl"]=sys.argv[3]
r["load_1m"]=float(sys.argv[4]) if sys.argv[4] != "null" else None; r.setdefault("iters_max", int(sys.argv[5]))
if sys.argv[3] == "memsafe": r["openblas_coretype"]=sys.argv[6] if sys.argv[6] != "inherit" else None
r["suite"]="sgpr_train"; import datetime; sys.path.insert(0, "bench"); from bench_common import cpu_model
r.setdefault("host_cpu", cpu_model()); r["timestamp"]=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
r.setdefault("status", "ok" if r.get("rmse") is not None else "error"); print(json.dumps(r))' \
          "$line" "${cmd[*]}" "$impl" "$load" "$ITERS" "$coretype" >> "$OUT"
      done
    done
  done
done
