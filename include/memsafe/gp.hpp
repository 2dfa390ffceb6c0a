// memsafe/gp.hpp — the opt-in entry header of the GP module: the SGPR (Titsias) collapsed bound, its
// gradient with respect to every hyperparameter and the inducing points, and predictions; the exact
// GP solved by preconditioned conjugate gradients over budgeted kernel products; with the
// n-sized work in budgeted chunks and the m×m work through LAPACK (docs/design.md, "The GP module").
// Needs BLAS/LAPACK: link the CMake target memsafe::lapack (which defines MEMSAFE_HAS_LAPACK).
//
//   memsafe::gp::hyperparameters h{memsafe::gp::kernel::matern32, 1.0, std::vector<double>(d, 1.0), 0.1};
//   auto r = memsafe::gp::sgpr({X, y, n, d}, {Z, m, d}, h, {.budget = 64 << 20, .gradient = true});
//   r.bound; r.grad.variance; r.grad.lengthscales; r.grad.noise; r.grad.Z;
//   memsafe::gp::predict(r.posterior, Xs, ns, mean, var, 64 << 20);
// and the exact GP by preconditioned conjugate gradients (gp/exact.hpp):
//   auto s = memsafe::gp::exact_solve({X, y, n, d}, h, {.budget = 64 << 20, .tolerance = 1e-2});
//   s.alpha; s.iterations; s.residual; s.converged;
//   memsafe::gp::exact_predict_mean({X, y, n, d}, s.alpha.data(), 1, h, {Xs, ns, d}, mean, {.budget = 64 << 20});
#pragma once
#if !defined(MEMSAFE_HAS_LAPACK)
#error "<memsafe/gp.hpp> needs BLAS/LAPACK: link the CMake target memsafe::lapack (which defines MEMSAFE_HAS_LAPACK=1 and links LAPACK), not only memsafe::memsafe"
#else
#include "linalg.hpp"
#include "gp/kernels.hpp"
#include "gp/sgpr.hpp"
#include "gp/exact.hpp"
#endif
