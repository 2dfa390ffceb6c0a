#!/usr/bin/env bash
# Every benchmark suite with the settings behind the committed results in bench/results/, then the
# report (docs/benchmarks.md and its PNGs). Build first (Release, the default of scripts/test.sh):
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j"$(nproc)"
#   pip install -r bench/requirements.txt      # KeOps, numpy, matplotlib
#   bash bench/run_all.sh                      # about an hour on 2 cores
# Run it on an otherwise idle machine: the peers run back to back with memsafe, but a busy machine
# still shifts every number.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python3 bench/run.py peak
python3 bench/run.py knn --reps 3 --peer-max-call-s 15
python3 bench/run.py mnist --reps 3 --peer-max-call-s 15
python3 bench/run.py matvec3 --reps 2
python3 bench/run.py overhead --reps 15
python3 bench/run.py fig2 --reps 1 --fig2-max-s 10
python3 bench/run.py sweep --reps 1 --sweep-max-s 15
python3 bench/run.py peak
python3 bench/report.py
