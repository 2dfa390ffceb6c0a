// memsafe/backend/cuda/launch.cuh — the launches the drivers share: device coordinate scaling, tile
// generation (cuBLAS X·Yᵀ + epilogue, or the semiring kernel), the fused kernel at its register
// width, and cuBLAS GEMM accumulation of a tile times a dense operand.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "device_expr.cuh"
#include "kernels_fold.cuh"
#include "kernels_pairwise.cuh"
#include "plan.cuh"
#include "runtime.cuh"

namespace memsafe::cuda::detail {

/// A leaf's coordinate scaling on the device: its ARD values (if any) copied into the budget.
template <class T>
struct device_scale {
  device_buffer<T> ard;
  dev_scale<T> scale;
  device_scale(const formula_params<T>& p, std::size_t d, device_accountant& acc) {
    if (p.kind != per_dim_kind::none) {
      ard = device_buffer<T>(acc, d);
      MEMSAFE_CUDA_CHECK(cudaMemcpyAsync(ard.data(), p.per_dim, d * sizeof(T), cudaMemcpyDefault, acc.stream()));
    }
    scale = {ard.data(), p.kind};
  }
};

/// Writes map(F(x_i, y_j)) for the block Xb × Yc into `tile` (row-major, ld); with `screen` (a
/// squared distance through cuBLAS), the unmapped screening values ‖x‖² + ‖y‖² − 2x·y instead, the
/// norms left in xn and yn (kernels_screen.cuh).
template <class Map, class Leaf, class T>
void generate_tile(const Map& map, const Leaf& leaf, const dev_scale<T>& sc, const dev_points<T>& Xb,
                   const dev_points<T>& Yc, T* tile, std::int64_t ld, bool gemm, blas* bl, T* xn, T* yn,
                   cudaStream_t s, bool screen = false) {
  using F = typename Leaf::formula_type;
  constexpr base_kind B = F::base;
  const T ysign = leaf.params.y_sign;
  if (Xb.n == 0 || Yc.n == 0) return;
  if (screen && !(gemm && Xb.cs == 1 && Yc.cs == 1))
    throw error("memsafe::cuda: internal: a screened tile needs cuBLAS and unit-stride points");
  if (gemm && Xb.cs == 1 && Yc.cs == 1) {
    if constexpr (B != base_kind::l1) {
      const T one = 1, zero = 0;
      // Row-major C (ni × nj) = X·Yᵀ is column-major Cᵀ = Y·Xᵀ: op(A) = Yᵀ-storage transposed.
      if constexpr (std::is_same_v<T, float>)
        MEMSAFE_CUDA_CHECK(cublasSgemm(bl->get(), CUBLAS_OP_T, CUBLAS_OP_N, int(Yc.n), int(Xb.n), int(Xb.d), &one,
                                       Yc.p, int(Yc.rs), Xb.p, int(Xb.rs), &zero, tile, int(ld)));
      else
        MEMSAFE_CUDA_CHECK(cublasDgemm(bl->get(), CUBLAS_OP_T, CUBLAS_OP_N, int(Yc.n), int(Xb.n), int(Xb.d), &one,
                                       Yc.p, int(Yc.rs), Xb.p, int(Xb.rs), &zero, tile, int(ld)));
      if constexpr (B != base_kind::dot) {
        kernels::norms_kernel<B><<<unsigned(cdiv(Xb.n, 256)), 256, 0, s>>>(Xb, xn);
        MEMSAFE_CUDA_LAUNCHED("norms_kernel");
        kernels::norms_kernel<B><<<unsigned(cdiv(Yc.n, 256)), 256, 0, s>>>(Yc, yn);
        MEMSAFE_CUDA_LAUNCHED("norms_kernel");
      }
      if (screen) return;  // the selection kernels form the screening values from x·y (kernels_screen.cuh)
      const std::int64_t total = Xb.n * Yc.n;
      const unsigned blocks = unsigned(std::min<std::int64_t>(cdiv(total, 256), 65535));
      kernels::gemm_epilogue_kernel<Map, B><<<blocks, 256, 0, s>>>(map, tile, ld, Xb.n, Yc.n, xn, yn, ysign, screen);
      MEMSAFE_CUDA_LAUNCHED("gemm_epilogue_kernel");
      return;
    }
  }
  const dim3 grid(unsigned(cdiv(Yc.n, kernels::tile_bn)), unsigned(cdiv(Xb.n, kernels::tile_bm)));
  kernels::tile_kernel<Map, B><<<grid, kernels::tile_threads, 0, s>>>(map, Xb, sc, Yc, sc, ysign, tile, ld);
  MEMSAFE_CUDA_LAUNCHED("tile_kernel");
}

/// The fused kernels' grid: blocks of `rows` query rows over the row block, and the S column
/// splits of the chunk, `cps` columns each.
struct fused_grid {
  dim3 grid;
  std::int64_t cps;
  fused_grid(std::int64_t ni, std::int64_t nj, int rows, int S)
      : grid(unsigned(cdiv(std::max<std::int64_t>(ni, 1), rows)), unsigned(S)),
        cps(std::max<std::int64_t>(1, std::int64_t(cdiv(std::max<std::int64_t>(nj, 1), S)))) {}
};

/// Call f.template operator()<DB, R, DE>() with the fused sum kernels' instance for d coordinates:
/// DB of them in registers (4, 16 or 64, zero-padded), R query rows per thread
/// (fused_rows_per_thread), DE evaluated (DB, but the exact count below 4 for the exp2 form).
template <class Map, class DMon, base_kind B, class T, class Fn>
void with_fused_instance(std::size_t d, Fn&& f) {
  constexpr int R4 = fused_rows_per_thread<4, DMon>();
  if constexpr (kernels::exp2_sum<Map, DMon, B, T>) {  // exact coordinate counts below 4
    if (d <= 1) return f.template operator()<4, R4, 1>();
    if (d == 2) return f.template operator()<4, R4, 2>();
    if (d == 3) return f.template operator()<4, R4, 3>();
  }
  if (d <= 4) f.template operator()<4, R4, 4>();
  else if (d <= 16) f.template operator()<16, fused_rows_per_thread<16, DMon>(), 16>();
  else f.template operator()<64, fused_rows_per_thread<64, DMon>(), 64>();
}

/// Launch the fused kernel for one (row block, column chunk) with DB coordinates in registers, DE
/// of them evaluated.
template <int DB, int R, int DE, class Map, class DMon, class Leaf, class T>
void launch_fused_db(const Map& map, const DMon& mon, const Leaf& leaf, const dev_scale<T>& sc,
                     const dev_points<T>& Xb, const dev_points<T>& Yc, std::int64_t j_base, int S,
                     typename DMon::state* part, bool first, cudaStream_t s) {
  using F = typename Leaf::formula_type;
  const std::int64_t ni = Xb.n;
  const fused_grid g(ni, Yc.n, fused_tj * R, S);
  kernels::fused_rows_kernel<Map, DMon, F::base, DB, R, fused_tj, T, DE><<<g.grid, fused_tj, 0, s>>>(
      map, mon, Xb, sc, Yc, sc, T(leaf.params.y_sign), j_base, g.cps, part, ni, first);
  MEMSAFE_CUDA_LAUNCHED("fused_rows_kernel");
}
/// The fused selection kernel's shared memory for d coordinates: columns per tile from 256 down
/// to one step while the layout passes 48 KiB (the launch raises the limit when one step does).
template <class T>
kernels::fsel_layout fsel_layout_for(std::size_t d) {
  kernels::fsel_layout L;
  L.dp = int(std::max<std::size_t>(4, (d + 3) / 4 * 4));
  L.ldy = kernels::fsel_layout::ld_for<T>(L.dp);
  L.tp = 256;
  while (L.tp > fsel_step && L.template bytes<T>() > 48 * 1024) L.tp -= fsel_step;
  return L;
}
/// Launch the fused selection kernel (kernels_pairwise.cuh) for one (row block, column chunk).
template <class Map, class DMon, class Leaf, class T>
void launch_fused_select(const Map& map, const DMon& mon, const Leaf& leaf, const dev_scale<T>& sc,
                         const dev_points<T>& Xb, const dev_points<T>& Yc, std::int64_t j_base, int S,
                         typename DMon::state* part, bool first, cudaStream_t s) {
  using F = typename Leaf::formula_type;
  const std::int64_t ni = Xb.n;
  const fused_grid g(ni, Yc.n, fsel_block_rows, S);
  const kernels::fsel_layout L = fsel_layout_for<T>(leaf.dim());
  const std::size_t bytes = L.template bytes<T>();
  const auto kernel = kernels::fused_select_kernel<Map, DMon, F::base, T>;
  // Set before each launch on the kernel it launches (kernel host stubs are per translation unit:
  // see the top-k launch in rows.cuh).
  if (bytes > 48 * 1024)
    MEMSAFE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  kernel<<<g.grid, fsel_warps * 32, bytes, s>>>(map, mon, Xb, sc, Yc, sc, T(leaf.params.y_sign), j_base, g.cps,
                                               part, ni, first, L);
  MEMSAFE_CUDA_LAUNCHED("fused_select_kernel");
}
/// The fused path: selections by the warp-list kernel, the other monoids by fused_rows_kernel.
template <class Map, class DMon, class Leaf, class T>
void launch_fused(const Map& map, const DMon& mon, const Leaf& leaf, const dev_scale<T>& sc, const dev_points<T>& Xb,
                  const dev_points<T>& Yc, std::int64_t j_base, int S, typename DMon::state* part, bool first,
                  cudaStream_t s) {
  using F = typename Leaf::formula_type;
  const std::size_t d = leaf.dim();
  if constexpr (warp_selection<DMon>) {
    launch_fused_select(map, mon, leaf, sc, Xb, Yc, j_base, S, part, first, s);
  } else {
    with_fused_instance<Map, DMon, F::base, T>(d, [&]<int DB, int R, int DE>() {
      launch_fused_db<DB, R, DE>(map, mon, leaf, sc, Xb, Yc, j_base, S, part, first, s);
    });
  }
}

/// Symmetric K·v (rows.cuh, run_symmetric): the band of ni rows from r0 against the columns
/// [r0, n), S splits of cps columns; the rows' split states to part, the column sums to colpart.
template <class Map, class DMon, class Leaf, class T>
void launch_sym(const Map& map, const DMon& mon, const Leaf& leaf, const dev_scale<T>& sc, const dev_points<T>& X,
                std::int64_t r0, std::int64_t ni, int S, std::int64_t cps, typename DMon::state* part, T* colpart,
                cudaStream_t s) {
  using F = typename Leaf::formula_type;
  with_fused_instance<Map, DMon, F::base, T>(leaf.dim(), [&]<int DB, int R, int DE>() {
    const dim3 grid(unsigned(cdiv(std::max<std::int64_t>(ni, 1), std::int64_t(fused_tj) * R)), unsigned(S));
    kernels::fused_sym_kernel<Map, DMon, F::base, DB, R, fused_tj, T, DE><<<grid, fused_tj, 0, s>>>(
        map, mon, X, sc, T(leaf.params.y_sign), r0, cps, part, ni, colpart);
    MEMSAFE_CUDA_LAUNCHED("fused_sym_kernel");
  });
}

/// acc (ni × c, row-major, ld c) += tile (ni × nj, ld) · B (rows of the column operand, nj × c).
template <class T>
void gemm_accumulate(blas& bl, const T* tile, std::int64_t ld, std::int64_t ni, std::int64_t nj,
                     const dev_points<T>& Bc, T* acc, std::int64_t c) {
  if (ni == 0 || nj == 0) return;
  const T one = 1;
  // Column-major accᵀ (c × ni) += Bᵀ (c × nj) · tileᵀ (nj × ni).
  // Row-major B is column-major Bᵀ (op N); column-major B is read transposed (op T).
  const auto b = blas_layout(std::size_t(nj), std::size_t(c), std::size_t(Bc.rs), std::size_t(Bc.cs));
  if (!b) throw argument_error(operand_stride_message);  // refused by the planner first (check_shape)
  const cublasOperation_t opb = b->transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  if constexpr (std::is_same_v<T, float>)
    MEMSAFE_CUDA_CHECK(cublasSgemm(bl.get(), opb, CUBLAS_OP_N, int(c), int(ni), int(nj), &one, Bc.p, b->ld, tile,
                                   int(ld), &one, acc, int(c)));
  else
    MEMSAFE_CUDA_CHECK(cublasDgemm(bl.get(), opb, CUBLAS_OP_N, int(c), int(ni), int(nj), &one, Bc.p, b->ld, tile,
                                   int(ld), &one, acc, int(c)));
}

inline unsigned blocks_for(std::int64_t count, int threads = 256) {
  return unsigned(std::max<std::int64_t>(1, std::int64_t(cdiv(std::max<std::int64_t>(count, 1), threads))));
}

}  // namespace memsafe::cuda::detail
