// memsafe/backend/cuda/eval.cuh — memsafe::cuda::eval: the same expressions, evaluated on the GPU
// in budget-bounded kernel launches (this header gathers the backend's pieces).
//
//   capture and rewrite: shared with the host (row_job / normalize give the rewritten lazy matrix,
//                        the reduction and the hoisted linear terms)
//   plan:                plan.cuh picks the kernel path, the row block ti, the column chunk tj and
//                        the column splits S (from the device's SM count, device_resources) so that
//                        every device and pinned temporary fits the budget; budget_error before any
//                        allocation or launch otherwise
//   execute:             rows.cuh / product.cuh: row blocks × column chunks of launches on one stream;
//                        host-resident inputs streamed through double-buffered staging (staging.cuh);
//                        partial states merged per row; host outputs staged (output.cuh)
//   public layer:        api.cuh: eval, eval_into, plan_for
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
//   product      lazy × lazy: tiles of both factors, cuBLAS GEMM accumulation per output block
#pragma once
#include "api.cuh"
#include "launch.cuh"
#include "output.cuh"
#include "plan.cuh"
#include "product.cuh"
#include "product_plan.cuh"
#include "rows.cuh"
#include "rows_plan.cuh"
