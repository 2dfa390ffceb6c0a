#!/bin/sh
# CTest example.sgpr_train_model_roundtrip: sgpr_train's --save-model, --init-model and --time-limit.
#
#   sh sgpr_model_roundtrip.sh SGPR_TRAIN DATA_DIR WORK_DIR
#
# 1. Train 3 iterations on kin40k (m = 40), saving the model: the file holds m rows of Z.
# 2. Evaluate the saved model (--init-model, --iters 0): the same bound as step 1's final model
#    (to 1e-12 relative: the parameters go through softplus and back) and the same test RMSE.
# 3. A model for another m is refused with a message naming both.
# 4. --time-limit 0.01 stops a 1000-iteration run after its first iteration (lbfgs_status time_limit).
# 5. Line searches allowed two evaluations fail: without restarts (--lbfgs-restarts 0) training stops
#    early with liblbfgs's status; with them it restarts from the last accepted iterate, goes further
#    (a higher bound, within the iteration budget) and reports each restart.
# 6. A model whose noise sits exactly at the 1e-6 floor (where training leaves it on noiseless
#    targets) loads and evaluates; --lbfgs-memory 0 (which liblbfgs would divide by) is refused.
set -eu
bin=$1
data=$2
work=$3
mkdir -p "$work"
model=$work/model.txt
rm -f "$model"
field() {  # field NAME JSON: the number after "NAME": in the JSON line
  printf '%s\n' "$2" | sed -n "s/.*\"$1\": \([^,}]*\).*/\1/p"
}
fail() {
  echo "FAIL: $*"
  exit 1
}
run1=$("$bin" --dataset kin40k --m 40 --iters 3 --budget 1MiB --threads 2 --data-dir "$data" --save-model "$model" 2>/dev/null)
echo "trained: $run1"
[ -f "$model" ] || fail "no model file written"
[ ! -f "$model.tmp" ] || fail "the temporary file was left behind"
rows=$(sed -n '/^Z$/,$p' "$model" | tail -n +2 | wc -l)
[ "$rows" -eq 40 ] || fail "the model file holds $rows rows of Z, not 40"
run2=$("$bin" --dataset kin40k --m 40 --iters 0 --budget 1MiB --threads 2 --data-dir "$data" --init-model "$model" 2>/dev/null)
echo "reloaded: $run2"
b1=$(field bound "$run1")
b2=$(field bound "$run2")
r1=$(field rmse "$run1")
r2=$(field rmse "$run2")
awk -v a="$b1" -v b="$b2" -v r="$r1" -v s="$r2" 'BEGIN {
  d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a
  e = r - s; if (e < 0) e = -e
  exit !(a != "" && d <= 1e-12 * m && e <= 1e-12 * r) }' || fail "bound $b1 / $b2 or RMSE $r1 / $r2 differ after the round trip"
run3=$("$bin" --dataset kin40k --m 30 --iters 0 --budget 1MiB --threads 2 --data-dir "$data" --init-model "$model" 2>/dev/null || true)
echo "wrong m: $run3"
case $run3 in
  *"holds a model for kin40k split 0, matern32, m = 40"*"this run is kin40k split 0, matern32, m = 30"*) ;;
  *) fail "a model for another m was not refused clearly" ;;
esac
run4=$("$bin" --dataset kin40k --m 40 --iters 1000 --time-limit 0.01 --budget 1MiB --threads 2 --data-dir "$data" 2>/dev/null)
echo "time limit: $run4"
case $run4 in
  *'"lbfgs_status": "time_limit"'*'"iterations": 1,'*) ;;
  *) fail "--time-limit did not stop training after the first iteration" ;;
esac
# Line searches of at most 2 evaluations: on kin40k m = 50 one fails after 15 iterations here (the
# iteration may move with the CPU's rounding; where none fails the check below is skipped, visibly).
run5=$("$bin" --dataset kin40k --m 50 --iters 40 --lbfgs-max-linesearch 2 --lbfgs-restarts 0 --budget 1MiB --threads 2 --data-dir "$data" 2>/dev/null)
echo "no restarts: $run5"
it5=$(field iterations "$run5")
if [ "$it5" -lt 40 ]; then
  case $run5 in
    *'"lbfgs_status": "'*'"lbfgs_restarts": 0,'*) ;;
    *) fail "no lbfgs_status / lbfgs_restarts 0 in the run without restarts" ;;
  esac
  [ "$(field stopped_by_line_search "$run5")" = true ] ||
    fail "a run that stopped at iteration $it5 of 40 without restarts does not say a line search failed"
  run6=$("$bin" --dataset kin40k --m 50 --iters 40 --lbfgs-max-linesearch 2 --lbfgs-restarts 100 --budget 1MiB --threads 2 --data-dir "$data" 2>/dev/null)
  echo "restarts: $run6"
  it6=$(field iterations "$run6")
  [ "$(field lbfgs_restarts "$run6")" -ge 1 ] || fail "no restart was reported"
  [ "$it6" -gt "$it5" ] || fail "the restarted run made $it6 iterations, no more than the $it5 without restarts"
  [ "$it6" -le 40 ] || fail "the restarted run made $it6 iterations, more than its budget of 40"
  b5=$(field bound "$run5")
  b6=$(field bound "$run6")
  awk -v a="$b5" -v b="$b6" 'BEGIN { exit !(b > a) }' || fail "the restarted run's bound $b6 is not above the stopped run's $b5"
else
  echo "SKIPPED: the restart check: no line search of 2 evaluations failed in 40 iterations on this machine"
fi
floor_model=$work/model_floor.txt
sed 's/^\(variance [^ ]*\) noise [^ ]* /\1 noise 1e-06 /' "$model" > "$floor_model"
grep -q '^variance [^ ]* noise 1e-06 jitter' "$floor_model" || fail "could not write a model with noise at the floor"
run7=$("$bin" --dataset kin40k --m 40 --iters 0 --budget 1MiB --threads 2 --data-dir "$data" --init-model "$floor_model" 2>/dev/null || true)
echo "noise at the floor: $run7"
n7=$(field noise "$run7")
b7=$(field bound "$run7")
awk -v a="$n7" -v b="$b7" 'BEGIN { exit !(a == 1e-6 && b != "" && b != "null") }' ||
  fail "a model with noise at the floor did not load and evaluate (noise '$n7', bound '$b7')"
run8=$("$bin" --dataset kin40k --m 40 --iters 5 --lbfgs-memory 0 --budget 1MiB --threads 2 --data-dir "$data" 2>&1 || true)
echo "history 0: $run8"
case $run8 in
  *"--lbfgs-memory must be between 1 and 1000"*) ;;
  *) fail "--lbfgs-memory 0 was not refused clearly" ;;
esac
echo "sgpr_model_roundtrip: pass"
