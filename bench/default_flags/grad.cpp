// bench/default_flags/grad.cpp — the vector–Jacobian product of y = K(X, X')·v with respect to X
// (memsafe::grad, X = X': n×d, N(0, 1), one thread, 64 MiB) for the RBF and Matérn-3/2 kernels, f32
// and f64; one JSON line per (kernel, precision) with the best of --reps calls. Built twice by
// bench/default_flags.sh (plain -O2, and -O3 -march=native -fno-math-errno).
//   grad <n> <d> <reps>
#include <memsafe/grad.hpp>
#include <memsafe/memsafe.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {
template <class T, class Make>
void run(const char* kernel, std::size_t n, std::size_t d, int reps, Make make) {
  std::mt19937_64 g(1);
  std::normal_distribution<double> N;
  std::vector<T> x(n * d), v(n), gb(n);
  for (auto& a : x) a = T(N(g));
  for (auto& a : v) a = T(N(g));
  for (auto& a : gb) a = T(N(g));
  const std::vector<T> xc = x;  // a second point set: the gradient is with respect to the first only
  auto X = memsafe::points(x.data(), n, d), Xc = memsafe::points(xc.data(), n, d);
  const memsafe::options o{std::size_t(64) << 20, 1};
  const auto b = memsafe::vjp(make(X, Xc) * memsafe::vec(v.data(), n), memsafe::vec(gb.data(), n), memsafe::wrt(X));
  double best = 1e300, check = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto gr = memsafe::grad(b, o);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    check = 0;
    for (T e : gr.of(X)) check += double(e);
  }
  std::printf("{\"bench\": \"grad\", \"kernel\": \"%s\", \"precision\": \"%s\", \"n\": %zu, \"d\": %zu, \"threads\": 1, "
              "\"seconds\": %.6f, \"check_sum\": %.10g}\n",
              kernel, sizeof(T) == 4 ? "f32" : "f64", n, d, best, check);
}
template <class T>
void all(std::size_t n, std::size_t d, int reps) {
  run<T>("rbf", n, d, reps, [](auto X, auto Y) { return memsafe::rbf(X, Y, 1.0, 1.0); });
  run<T>("matern32", n, d, reps, [](auto X, auto Y) { return memsafe::matern32(X, Y, 1.0, 1.0); });
}
}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 10000;
  const std::size_t d = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 3;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
  all<float>(n, d, reps);
  all<double>(n, d, reps);
}
