// bench/default_flags/sgpr.cpp — one gp::sgpr bound + gradient (synthetic N(0, 1) data: n points,
// m inducing points, d dimensions; one thread, 64 MiB of temporaries) for the RBF and Matérn-3/2
// kernels; one JSON line each with the best of --reps calls and its forward and backward parts.
// Built twice by bench/default_flags.sh (plain -O2, and -O3 -march=native -fno-math-errno). BLAS
// runs one thread (OPENBLAS_NUM_THREADS=1 from the script).
//   sgpr <n> <m> <d> <reps>
#include <memsafe/gp.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

/// "true"/"false": which copy of the row kernels ran (sgpr_stats::avx2_rows); "null" for headers
/// from before it was reported (BASE_REV in bench/default_flags.sh).
template <class S>
const char* avx2_rows_of(const S& s) {
  if constexpr (requires { s.avx2_rows; }) return s.avx2_rows ? "true" : "false";
  else return "null";
}

int main(int argc, char** argv) {
  namespace gp = memsafe::gp;
  const std::size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 20000;
  const std::size_t m = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 1000;
  const std::size_t d = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 8;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 3;
  std::mt19937_64 g(1);
  std::normal_distribution<double> N;
  std::vector<double> X(n * d), y(n), Z(m * d);
  for (auto& v : X) v = N(g);
  for (auto& v : y) v = N(g);
  for (auto& v : Z) v = N(g);
  for (gp::kernel k : {gp::kernel::rbf, gp::kernel::matern32}) {
    gp::hyperparameters h;
    h.kind = k;
    h.variance = 1.3;
    h.lengthscales.assign(d, 1.7);
    h.noise = 0.2;
    const gp::sgpr_options o{.budget = std::size_t(64) << 20, .gradient = true, .threads = 1};
    double best = 1e300, fwd = 0, bwd = 0;
    gp::sgpr_result r;
    for (int rep = 0; rep < reps; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      r = gp::sgpr({X.data(), y.data(), n, d}, {Z.data(), m, d}, h, o);
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (t < best) {
        best = t;
        fwd = r.stats.seconds_forward;
        bwd = r.stats.seconds_backward;
      }
    }
    std::printf("{\"bench\": \"sgpr\", \"kernel\": \"%s\", \"precision\": \"f64\", \"n\": %zu, \"m\": %zu, \"d\": %zu, "
                "\"threads\": 1, \"seconds\": %.6f, \"seconds_forward\": %.6f, \"seconds_backward\": %.6f, "
                "\"avx2_rows\": %s, \"bound\": %.12g}\n",
                gp::kernel_name(k), n, m, d, best, fwd, bwd, avx2_rows_of(r.stats), r.bound);
  }
}
