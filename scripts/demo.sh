#!/usr/bin/env bash
# Build two of the examples, kernel_matvec and knn (Release, build/), and run the demo.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/deps.sh

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMEMSAFE_BUILD_EXAMPLES=ON
cmake --build build -j"$(nproc)" --target kernel_matvec knn

# Both problems would need more than 100 GB as dense matrices; each runs within a 64 MiB budget of
# temporaries, checks its answer against a direct computation in double, and fails unless the
# process's peak resident memory stays below inputs + budget + 40 MiB.
echo "== K(X,X)·v, RBF, n = 200000, d = 3, f64: the dense K would be 320 GB"
set -x
build/examples/kernel_matvec --n 200000 --d 3 --precision f64 --budget 64MiB --check 100 --rss-slack 40MiB
{ set +x; } 2>/dev/null
echo "== 10-NN of 30000 queries among 1000000 points, d = 3, f32: the dense distance matrix would be 120 GB"
set -x
build/examples/knn --data random --n 1000000 --m 30000 --d 3 --k 10 --budget 64MiB --check 50 --rss-slack 40MiB
