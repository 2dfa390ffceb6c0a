#!/usr/bin/env bash
# Whether AVX-VNNI's VPDPWSSD pays for the AVX2 kernels' int16 screen on this CPU: kNN L2, f32,
# n = 10^6 points, m = 1000 queries, k = 10, 64 MiB, 2 threads, MEMSAFE_ISA=avx2 (the int16 screen
# is their default at d >= 16), built twice with -O3 -march=native — as the headers are, and with
# cpu_has_avx_vnni() patched to false in a copy of them (VPMADDWD + VPADDD instead) — and run
# alternately. Prints each run's best-of-3 seconds, the plan's reduction line (which names
# AVX-VNNI when it runs) and a checksum of the indices (the same in both: the same integers).
#   bash bench/vnni_ab.sh [rounds=5] [d=100]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:-5}
d=${2:-100}
grep -qw avx_vnni /proc/cpuinfo || { echo "vnni_ab.sh: this CPU has no AVX-VNNI: nothing to compare" >&2; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/knn.cpp" <<'CPP'
#include <memsafe/memsafe.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
int main(int argc, char** argv) {
  const std::size_t n = 1000000, m = 1000, d = std::size_t(std::atoi(argv[1]));
  std::mt19937_64 g(7);
  std::normal_distribution<float> N(0, 1);
  std::vector<float> x(n * d), q(m * d);
  for (auto& a : x) a = N(g);
  for (auto& a : q) a = N(g);
  const auto X = memsafe::points(x.data(), n, d), Q = memsafe::points(q.data(), m, d);
  double best = 1e30;
  long sum = 0;
  std::string red;
  for (int r = 0; r < 4; ++r) {  // a warm-up call, then the best of 3
    const auto t0 = std::chrono::steady_clock::now();
    const auto res = memsafe::eval(memsafe::argkmin(memsafe::sqdist(Q, X), 10), memsafe::options{64u << 20, 2});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r) best = std::min(best, s);
    sum = 0;
    for (auto i : res.indices) sum += i;
    red = res.stats.plan.reduction;
  }
  std::printf("%.4f s  checksum %ld  %s\n", best, sum, red.c_str());
}
CPP
cp -r include "$tmp/novnni"
sed -i 's/static const bool has = cpuid_7_1_eax_bit(isa::avx2, 4);/static const bool has = false;/' \
  "$tmp/novnni/memsafe/backend/host/isa.hpp"
grep -q "static const bool has = false;" "$tmp/novnni/memsafe/backend/host/isa.hpp" ||
  { echo "vnni_ab.sh: could not patch cpu_has_avx_vnni (isa.hpp changed?)" >&2; exit 1; }
g++ -std=c++20 -O3 -march=native -Iinclude "$tmp/knn.cpp" -o "$tmp/vnni" -lpthread
g++ -std=c++20 -O3 -march=native -I"$tmp/novnni" "$tmp/knn.cpp" -o "$tmp/novnni_bin" -lpthread
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg), d = $d"
for ((r = 1; r <= rounds; ++r)); do
  echo -n "vnni    "; MEMSAFE_ISA=avx2 "$tmp/vnni" "$d"
  echo -n "no-vnni "; MEMSAFE_ISA=avx2 "$tmp/novnni_bin" "$d"
done
