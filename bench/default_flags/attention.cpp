// bench/default_flags/attention.cpp — one attention layer (memsafe::softmax_sum(dot(Q, K) / √d, V),
// B = 1, H heads, T queries and keys, d = dv = 64, N(0, 1) inputs, f32 and f64, 64 MiB) on <threads>
// threads: the forward alone ("fwd") and the backward alone ("bwd", from the forward's O and lse);
// one JSON line per (mode, precision) with the best of <reps> calls. Built twice by
// bench/default_flags.sh (plain -O2, and -O3 -march=native -fno-math-errno).
//   attention <T> <H> <reps> [threads]
#include <memsafe/attention.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <class T>
void run(std::size_t Tn, std::size_t H, int reps, std::size_t threads) {
  constexpr std::size_t B = 1, d = 64;
  const std::size_t n = B * H * Tn * d;
  std::mt19937_64 g(1);
  std::normal_distribution<double> N;
  std::vector<T> q(n), k(n), v(n), o(n), dO(n), dq(n), dk(n), dv(n), lse(B * H * Tn);
  for (auto* a : {&q, &k, &v, &dO})
    for (auto& e : *a) e = T(N(g));
  const auto Q = memsafe::heads(q.data(), B, H, Tn, d), K = memsafe::heads(k.data(), B, H, Tn, d),
             V = memsafe::heads(v.data(), B, H, Tn, d);
  const auto A = memsafe::softmax_sum(T(1 / std::sqrt(double(d))) * memsafe::dot(Q, K), V);
  const memsafe::options opt{std::size_t(64) << 20, static_cast<unsigned>(threads)};
  const auto Ov = memsafe::heads(o.data(), B, H, Tn, d);
  double fwd = 1e300, bwd = 1e300;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    memsafe::eval_into(A, Ov, lse.data(), opt);
    fwd = std::min(fwd, since(t0));
    t0 = std::chrono::steady_clock::now();
    memsafe::attention_backward(A, memsafe::heads(static_cast<const T*>(o.data()), B, H, Tn, d), lse.data(),
                                memsafe::heads(static_cast<const T*>(dO.data()), B, H, Tn, d),
                                memsafe::heads(dq.data(), B, H, Tn, d), memsafe::heads(dk.data(), B, H, Tn, d),
                                memsafe::heads(dv.data(), B, H, Tn, d), opt);
    bwd = std::min(bwd, since(t0));
  }
  double co = 0, cg = 0;
  for (std::size_t i = 0; i < n; ++i) {
    co += double(o[i]);
    cg += double(dq[i]) + double(dk[i]) + double(dv[i]);
  }
  const char* prec = sizeof(T) == 4 ? "f32" : "f64";
  std::printf("{\"bench\": \"attention\", \"kernel\": \"fwd\", \"precision\": \"%s\", \"n\": %zu, \"m\": %zu, \"d\": %zu, "
              "\"threads\": %zu, \"seconds\": %.6f, \"check_sum\": %.10g}\n",
              prec, Tn, H, d, threads, fwd, co);
  std::printf("{\"bench\": \"attention\", \"kernel\": \"bwd\", \"precision\": \"%s\", \"n\": %zu, \"m\": %zu, \"d\": %zu, "
              "\"threads\": %zu, \"seconds\": %.6f, \"check_sum\": %.10g}\n",
              prec, Tn, H, d, threads, bwd, cg);
}
}  // namespace

int main(int argc, char** argv) {
  const std::size_t Tn = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 2048;
  const std::size_t H = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 2;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
  const std::size_t threads = argc > 4 ? std::strtoul(argv[4], nullptr, 10) : 1;
  run<float>(Tn, H, reps, threads);
  run<double>(Tn, H, reps, threads);
}
