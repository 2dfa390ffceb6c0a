// memsafe/gp/kernels.hpp — the stationary ARD kernels of the GP module and their derivatives.
//
//   k(x, z) = σ_f² · φ(r²),   r² = Σ_k (x_k − z_k)² / ℓ_k²
//   rbf       φ = exp(−r²/2)
//   matern12  φ = exp(−r)
//   matern32  φ = (1 + √3 r) exp(−√3 r)
//   matern52  φ = (1 + √5 r + 5r²/3) exp(−√5 r)
// Every derivative the SGPR gradient needs follows from ψ = dφ/d(r²):
//   ∂k/∂σ_f² = φ,  ∂k/∂z_k = σ_f² ψ · (−2 (x_k − z_k)/ℓ_k²),  ∂k/∂ℓ_k = σ_f² ψ · (−2 (x_k − z_k)²/ℓ_k³).
// Matérn 1/2 is not differentiable at r = 0; there ψ is taken as 0 (every term it multiplies has a
// factor x_k − z_k = 0), so a point sitting exactly on an inducing point contributes no gradient.
// φ and ψ use memsafe::math's exp (< 1 ulp) and the sqrt builtin, without branches, so that the
// GP module's loops over a row of r² values vectorise (row_kernel.inc).
#pragma once
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "../core/error.hpp"
#include "../core/math.hpp"

namespace memsafe::gp {

/// The stationary kernels of the GP module (all with ARD lengthscales).
enum class kernel { rbf, matern12, matern32, matern52 };

/// "rbf", "matern12", "matern32", "matern52".
inline const char* kernel_name(kernel k) {
  switch (k) {
    case kernel::rbf: return "rbf";
    case kernel::matern12: return "matern12";
    case kernel::matern32: return "matern32";
    case kernel::matern52: return "matern52";
  }
  return "?";
}

/// Parse a kernel name (the inverse of kernel_name; also "se", "matern1/2", …). argument_error otherwise.
inline kernel parse_kernel(std::string_view s) {
  if (s == "rbf" || s == "se" || s == "gaussian") return kernel::rbf;
  if (s == "matern12" || s == "matern1/2" || s == "exponential") return kernel::matern12;
  if (s == "matern32" || s == "matern3/2") return kernel::matern32;
  if (s == "matern52" || s == "matern5/2") return kernel::matern52;
  throw argument_error(memsafe::detail::cat(
      memsafe::detail::msg{"memsafe::gp: unknown kernel \"", s, "\" (rbf, matern12, matern32, matern52)"}));
}

}  // namespace memsafe::gp

namespace memsafe::detail::gp {

/// φ(r²) and ψ = dφ/d(r²) of one kernel, chosen at compile time (the inner loops are instantiated
/// once per kernel through with_kernel). The Matérn kernels are functions of s = √(root_scale·r²):
/// phi_s / phi_psi_s take s as computed, so that a loop over a row can take its square roots
/// together (math::sqrt_n, which vectorises without -fno-math-errno); phi / phi_psi compute it
/// themselves.
template <memsafe::gp::kernel K>
struct profile {
  static constexpr double inf = std::numeric_limits<double>::infinity();
  static constexpr bool root = K != memsafe::gp::kernel::rbf;
  static constexpr double root_scale = K == memsafe::gp::kernel::matern32 ? 3.0
                                       : K == memsafe::gp::kernel::matern52 ? 5.0
                                                                            : 1.0;
  /// √(root_scale·r²) (0 for the RBF, which needs none).
  static double root_of(double r2) {
    if constexpr (root) return memsafe::math::sqrt(root_scale * r2);
    else return 0.0;
  }
  /// φ from r² and s = root_of(r²).
  static double phi_s([[maybe_unused]] double r2, [[maybe_unused]] double s) {
    using memsafe::gp::kernel;
    namespace mm = memsafe::math;
    if constexpr (K == kernel::rbf) {
      return mm::exp(-0.5 * r2);
    } else if constexpr (K == kernel::matern12) {
      return mm::exp(-s);
    } else if constexpr (K == kernel::matern32) {
      const double f = s < inf ? s : 0.0;  // s = ∞ (r² overflowed): φ = 0, not (1 + ∞)·0
      return (1.0 + f) * mm::exp(-s);
    } else {
      const double f = s < inf ? s : 0.0;
      return (1.0 + f + f * f / 3.0) * mm::exp(-s);
    }
  }
  /// φ and ψ together (one exp) from r² and s = root_of(r²).
  static void phi_psi_s([[maybe_unused]] double r2, [[maybe_unused]] double s, double& phi, double& psi) {
    using memsafe::gp::kernel;
    namespace mm = memsafe::math;
    if constexpr (K == kernel::rbf) {
      phi = mm::exp(-0.5 * r2);
      psi = -0.5 * phi;
    } else if constexpr (K == kernel::matern12) {
      phi = mm::exp(-s);
      const double rs = s > 0 ? s : 1.0;  // both arms computed: a select, not a branch
      psi = s > 0 ? -0.5 * phi / rs : 0.0;
    } else if constexpr (K == kernel::matern32) {
      const double e = mm::exp(-s), f = s < inf ? s : 0.0;  // s = ∞: φ = ψ = 0 (e = 0)
      phi = (1.0 + f) * e;
      psi = -1.5 * e;  // dφ/dr = −3r e, dr/d(r²) = 1/(2r)
    } else {
      const double e = mm::exp(-s), f = s < inf ? s : 0.0;
      phi = (1.0 + f + f * f / 3.0) * e;
      psi = -(5.0 / 6.0) * (1.0 + f) * e;  // dφ/dr = −(5/3) r (1 + √5 r) e
    }
  }
  static double phi(double r2) { return phi_s(r2, root_of(r2)); }
  static void phi_psi(double r2, double& phi, double& psi) { phi_psi_s(r2, root_of(r2), phi, psi); }
};

/// Columns of the row loops (row_kernel.inc): one 64-byte vector of doubles.
inline constexpr std::size_t gp_lanes = 8;

/// The sum of W lanes, in lane order.
template <std::size_t W>
[[gnu::always_inline]] inline double lane_total(const double* l) {
  double t = 0;
  for (std::size_t w = 0; w < W; ++w) t += l[w];
  return t;
}

/// Calls f(std::integral_constant<kernel, K>{}) for the run-time kernel k.
template <class F>
decltype(auto) with_kernel(memsafe::gp::kernel k, F&& f) {
  using memsafe::gp::kernel;
  switch (k) {
    case kernel::rbf: return f(std::integral_constant<kernel, kernel::rbf>{});
    case kernel::matern12: return f(std::integral_constant<kernel, kernel::matern12>{});
    case kernel::matern32: return f(std::integral_constant<kernel, kernel::matern32>{});
    case kernel::matern52: break;
  }
  return f(std::integral_constant<kernel, kernel::matern52>{});
}

}  // namespace memsafe::detail::gp
