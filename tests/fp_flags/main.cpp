// config.fp_flags: a translation unit built by clang with -fno-honor-nans, or with
// -fassociative-math -fno-signed-zeros -fno-trapping-math (flags that define no macro config.hpp
// could refuse), gets a clear argument_error at its first evaluation instead of wrong answers
// (every min/argmin/k-nearest selection returned NaN and index -1 on clean data; an RQ K*v came out
// 5 % off); built with plain flags it answers as the naive loop does. Prints "refused", or "ok"
// after checking the answers, and exits 0; anything else exits 1.
#include <cstdio>
#include <exception>
#include <memsafe/memsafe.hpp>
#include <string_view>
#include <vector>

int main() {
  const std::size_t n = 40, d = 3;
  std::vector<double> x(n * d);
  unsigned s = 7;
  for (auto& a : x) {
    s = s * 1664525u + 1013904223u;
    a = double(s >> 8) / double(1u << 24) * 4 - 2;
  }
  const auto X = memsafe::points(static_cast<const double*>(x.data()), n, d);
  try {
    const auto r = memsafe::eval(memsafe::argkmin(memsafe::sqdist(X, X), 2));
    for (std::size_t i = 0; i < n; ++i) {  // each point is its own nearest; the second is the naive loop's
      std::size_t best = n;
      double bd = 0;
      for (std::size_t j = 0; j < n; ++j) {
        if (j == i) continue;
        double t = 0;
        for (std::size_t k = 0; k < d; ++k) t += (x[i * d + k] - x[j * d + k]) * (x[i * d + k] - x[j * d + k]);
        if (best == n || t < bd) best = j, bd = t;
      }
      if (r.indices[i * 2] != static_cast<long long>(i) || r.indices[i * 2 + 1] != static_cast<long long>(best)) {
        std::printf("wrong: row %zu gives %lld %lld, want %zu %zu\n", i, static_cast<long long>(r.indices[i * 2]),
                    static_cast<long long>(r.indices[i * 2 + 1]), i, best);
        return 1;
      }
    }
    std::printf("ok\n");
    return 0;
  } catch (const memsafe::argument_error& e) {
    const std::string_view w = e.what();
    if (w.find("without IEEE NaN semantics or with reassociation") != std::string_view::npos) {
      std::printf("refused: %s\n", e.what());
      return 0;
    }
    std::printf("unexpected argument_error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::printf("unexpected: %s\n", e.what());
    return 1;
  }
}
