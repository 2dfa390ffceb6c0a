// memsafe/backend/cuda/eval.cuh — memsafe::cuda::eval: the same expressions, evaluated on the GPU
// in budget-bounded kernel launches (this header gathers the backend's pieces).
//
//   lower:    shared with the host: api.cuh calls jobs::lower once (every rule fired once, into one
//             log), giving a bound_rows or a product_job (its output bound beside it, bound_product)
//   plan:     plan_job(job, budget, device_resources, residency, what) → rows_plan / product_plan,
//             pure (nothing allocated or launched): the kernel path, where the data live, the row
//             block ti, the column chunk tj and the column splits S (from the device's SM count) or
//             the product's blocks, so that every device and pinned temporary fits the budget;
//             argument_error or budget_error before anything runs (rows_plan.cuh, product_plan.cuh,
//             and plan.cuh for what both share)
//   execute:  run_job(job, plan, options, device_accountant&) follows the plan (rows.cuh,
//             product.cuh): row blocks × column chunks of launches on one stream; host-resident
//             inputs streamed through double-buffered staging (staging.cuh); partial states merged
//             per row; host outputs staged (output.cuh); the launches the drivers share (launch.cuh)
//   public:   api.cuh: eval, eval_into, plan_for (= lower + plan_job; eval adds run_job); options,
//             device_resources, cuda_error and device_out_of_memory; everything else is in
//             memsafe::cuda::detail
//
// Other pieces: runtime.cuh (errors, RAII stream/event/buffers/cuBLAS, the device accountant),
// device_expr.cuh (the lazy matrix as a device functor, rank keys), device_monoids.cuh (the
// reductions as register monoids), kernels_pairwise.cuh (fused map-reduce, tile generation, GEMM
// epilogue), kernels_fold.cuh (tile folds, split merges, softmax, block stores and transposes),
// kernels_topk.cuh (top-k by block radix sort).
//
// Kernel paths (chosen per evaluation, shown by plan_for):
//   fused        sum, min/max/argmin/argmax, logsumexp, top-k with k ≤ 16 and K·v when d ≤ 64:
//                no tile is ever written (fused_rows_kernel)
//   tile_fold    the same reductions at d > 64: a tile (cuBLAS GEMM + epilogue for dot-based
//                formulas, the shared-memory semiring kernel otherwise), then a per-row fold
//   tile_topk    top-k for 16 < k ≤ 2048: tile, then a CUB block radix sort merge per row
//   tile_matmul  K·M (several columns): tile, then cuBLAS GEMM accumulation
//   tile_softmax softmax_sum: tile, online max/sum update, cuBLAS GEMM accumulation
//   tile_dense   dense(E): tiles straight into a device output, or staged to a host one
//   product      lazy × lazy: tiles of both factors, cuBLAS GEMM accumulation per output block;
//                for A·Aᵀ (symmetric_product) only the blocks on and below the diagonal, mirrored
#pragma once
#include "api.cuh"
#include "launch.cuh"
#include "output.cuh"
#include "plan.cuh"
#include "product.cuh"
#include "product_plan.cuh"
#include "rows.cuh"
#include "rows_plan.cuh"
