#!/usr/bin/env bash
# Build the examples (Release, build/) and run the demo.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/deps.sh

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMEMSAFE_BUILD_EXAMPLES=ON
cmake --build build -j"$(nproc)" --target kernel_matvec knn

set -x
build/examples/kernel_matvec --n 200000 --d 3 --precision f64 --budget 64MiB --check 100
build/examples/knn --data random --n 1000000 --m 1000 --d 3 --k 10 --budget 64MiB --check 50
