// memsafe/backend/host/tile.hpp — tile generators: fill an ni×nj block of a (normalised) lazy matrix.
//
// One generator per node type. A generator is built per worker thread, asks for its workspace
// (`workspace_bytes`, used by the planner) and carves it from the thread's accounted buffer
// (`bind`). `fill` writes entries (i0+r, j0+c) to out[r*ld + c].
#pragma once
#include "../../core/algo.hpp"
#include <cstddef>

#include "kernels.hpp"
#include "tile_isa.hpp"
#include "../../expr/diag.hpp"
#include "../../expr/lazy.hpp"
#include "../../expr/tensor.hpp"
#include "../../rewrite/rules.hpp"

namespace memsafe::host {

// The host backend runs the implementation types of memsafe::detail (nodes, the accountant, ...).
using namespace memsafe::detail;

/// Carve `bytes` (64-byte aligned) from a cursor into a thread's workspace.
template <class U>
U* carve(std::byte*& cur, std::size_t count) {
  U* p = reinterpret_cast<U*>(cur);
  cur += host::align64(count * sizeof(U));
  return p;
}

template <class E>
struct tile_gen;

template <class F, class T, std::size_t RX, std::size_t RY, std::size_t D>
struct tile_gen<pairwise<F, T, RX, RY, D>> {
  using expr_type = pairwise<F, T, RX, RY, D>;
  static constexpr base_kind B = F::base;
  static constexpr bool cos = B == base_kind::cosine;
  static constexpr int R = 4;  // query rows per register block

  const expr_type& e;
  T* pack = nullptr;
  T* yinv = nullptr;
  T* xs = nullptr;
  std::size_t packed_j0 = ~std::size_t{0}, packed_nj = 0;
  host::tile_rows_fn<T> rows_block;  // the micro-kernel for R rows and for one (tile_isa.hpp)
  host::tile_rows_fn<T> rows_one;

  explicit tile_gen(const expr_type& ex) : e(ex) {
    const bool avx2 = host::tile_avx2();
    rows_block = host::tile_rows_for<F, R, T>(avx2);
    rows_one = host::tile_rows_for<F, 1, T>(avx2);
  }

  static std::size_t workspace_bytes(const expr_type& ex, std::size_t, std::size_t tj) {
    const std::size_t d = ex.dim(), np = host::panels<T>(tj), W = host::lanes<T>;
    return host::align64(np * W * d * sizeof(T)) + host::align64(R * d * sizeof(T)) +
           (cos ? host::align64(np * W * sizeof(T)) : 0);
  }
  void bind(std::byte*& cur, std::size_t, std::size_t tj) {
    const std::size_t d = e.dim(), np = host::panels<T>(tj), W = host::lanes<T>;
    pack = carve<T>(cur, np * W * d);
    xs = carve<T>(cur, R * d);
    if constexpr (cos) yinv = carve<T>(cur, np * W);
  }

  void fill(std::size_t i0, std::size_t ni, std::size_t j0, std::size_t nj, T* out, std::size_t ld) {
    const std::size_t d = e.dim();
    if (j0 != packed_j0 || nj != packed_nj) {  // the column tile is packed once per (row block, column block)
      host::pack_panels(e.y, e.params, j0, nj, pack, yinv);
      packed_j0 = j0;
      packed_nj = nj;
    }
    T xinv[R] = {};
    std::size_t r = 0;
    for (; r + R <= ni; r += R) {
      for (int q = 0; q < R; ++q) xinv[q] = host::load_row(e.x, e.params, i0 + r + q, xs + q * d, cos);
      rows_block(xs, xinv, pack, yinv, d, nj, out + r * ld, ld, e.params);
    }
    for (; r < ni; ++r) {
      xinv[0] = host::load_row(e.x, e.params, i0 + r, xs, cos);
      rows_one(xs, xinv, pack, yinv, d, nj, out + r * ld, ld, e.params);
    }
  }
};

/// A node that post-processes its one child's tile in place (its workspace is the child's).
template <class Expr, class E>
struct child_gen {
  using expr_type = Expr;
  using T = typename Expr::value_type;
  const Expr& e;
  tile_gen<E> child;
  explicit child_gen(const Expr& ex) : e(ex), child(ex.e) {}
  static std::size_t workspace_bytes(const Expr& ex, std::size_t ti, std::size_t tj) {
    return tile_gen<E>::workspace_bytes(ex.e, ti, tj);
  }
  void bind(std::byte*& cur, std::size_t ti, std::size_t tj) { child.bind(cur, ti, tj); }
};

template <class Op, class E>
struct tile_gen<unary_expr<Op, E>> : child_gen<unary_expr<Op, E>, E> {
  using base = child_gen<unary_expr<Op, E>, E>;
  using typename base::T;
  using base::base;
  using base::child;
  using base::e;
  void fill(std::size_t i0, std::size_t ni, std::size_t j0, std::size_t nj, T* out, std::size_t ld) {
    child.fill(i0, ni, j0, nj, out, ld);
    const Op op = e.op;
    for (std::size_t r = 0; r < ni; ++r) {
      T* o = out + r * ld;
      for (std::size_t j = 0; j < nj; ++j) o[j] = op(o[j]);
    }
  }
};

template <class Op, class A, class B>
struct tile_gen<binary_expr<Op, A, B>> {
  using expr_type = binary_expr<Op, A, B>;
  using T = typename expr_type::value_type;
  const expr_type& e;
  tile_gen<A> ga;
  tile_gen<B> gb;
  T* scratch = nullptr;
  explicit tile_gen(const expr_type& ex) : e(ex), ga(ex.a), gb(ex.b) {}
  static std::size_t workspace_bytes(const expr_type& ex, std::size_t ti, std::size_t tj) {
    return tile_gen<A>::workspace_bytes(ex.a, ti, tj) + tile_gen<B>::workspace_bytes(ex.b, ti, tj) +
           host::align64(ti * tj * sizeof(T));
  }
  void bind(std::byte*& cur, std::size_t ti, std::size_t tj) {
    ga.bind(cur, ti, tj);
    gb.bind(cur, ti, tj);
    scratch = carve<T>(cur, ti * tj);
  }
  void fill(std::size_t i0, std::size_t ni, std::size_t j0, std::size_t nj, T* out, std::size_t ld) {
    ga.fill(i0, ni, j0, nj, out, ld);
    gb.fill(i0, ni, j0, nj, scratch, nj);
    const Op op = e.op;
    for (std::size_t r = 0; r < ni; ++r) {
      T* o = out + r * ld;
      const T* s = scratch + r * nj;
      for (std::size_t j = 0; j < nj; ++j) o[j] = op(o[j], s[j]);
    }
  }
};

// ---- broadcast tensors (evaluated as written, one entry at a time) ---------------------------

/// Point evaluation of a rank-3 broadcast tensor: value at (a0, a1, a2). Leaves read their data
/// with stride 0 on inserted and size-1 axes, so broadcasting costs nothing.
template <class E>
struct tensor_point;
template <class T, std::size_t R, std::size_t A, std::size_t D>
struct tensor_point<tleaf<T, R, A, D>> {
  const T* p;
  std::size_t s0, s1, s2;
  explicit tensor_point(const tleaf<T, R, A, D>& l) : p(l.data) {
    const auto st = l.eff_strides();
    s0 = st[0];
    s1 = st[1];
    s2 = st[2];
  }
  T operator()(std::size_t a0, std::size_t a1, std::size_t a2) const { return p[a0 * s0 + a1 * s1 + a2 * s2]; }
};
template <class Op, class E>
struct tensor_point<tmap<Op, E>> {
  tensor_point<E> c;
  Op op;
  explicit tensor_point(const tmap<Op, E>& m) : c(m.e), op(m.op) {}
  auto operator()(std::size_t a0, std::size_t a1, std::size_t a2) const { return op(c(a0, a1, a2)); }
};
template <class Op, class A, class B>
struct tensor_point<tzip<Op, A, B>> {
  tensor_point<A> a;
  tensor_point<B> b;
  Op op;
  explicit tensor_point(const tzip<Op, A, B>& z) : a(z.a), b(z.b), op(z.op) {}
  auto operator()(std::size_t a0, std::size_t a1, std::size_t a2) const { return op(a(a0, a1, a2), b(a0, a1, a2)); }
};

template <std::size_t Ax, class E, bool Swap>
struct tile_gen<tsum<Ax, E, Swap>> {
  using expr_type = tsum<Ax, E, Swap>;
  using T = typename expr_type::value_type;
  const expr_type& e;
  tensor_point<E> pt;
  explicit tile_gen(const expr_type& ex) : e(ex), pt(ex.e) {}
  static std::size_t workspace_bytes(const expr_type&, std::size_t, std::size_t) { return 0; }
  void bind(std::byte*&, std::size_t, std::size_t) {}
  void fill(std::size_t i0, std::size_t ni, std::size_t j0, std::size_t nj, T* out, std::size_t ld) {
    const std::size_t K = e.reduced();
    std::size_t idx[3];
    for (std::size_t r = 0; r < ni; ++r)
      for (std::size_t c = 0; c < nj; ++c) {
        idx[expr_type::row_axis] = i0 + r;
        idx[expr_type::col_axis] = j0 + c;
        T acc = T(0);
        for (std::size_t k = 0; k < K; ++k) {
          idx[Ax] = k;
          acc += static_cast<T>(pt(idx[0], idx[1], idx[2]));
        }
        out[r * ld + c] = acc;
      }
  }
};

// ---- guarded rewrites ----------------------------------------------------------------------------
template <class Fa, class Sl>
struct tile_gen<guarded<Fa, Sl>> {
  using expr_type = guarded<Fa, Sl>;
  using T = typename expr_type::value_type;
  const expr_type& e;
  tile_gen<Fa> gf;
  tile_gen<Sl> gs;
  explicit tile_gen(const expr_type& ex) : e(ex), gf(ex.fast), gs(ex.slow) {}
  static std::size_t workspace_bytes(const expr_type& ex, std::size_t ti, std::size_t tj) {
    return ex.use_fast ? tile_gen<Fa>::workspace_bytes(ex.fast, ti, tj) : tile_gen<Sl>::workspace_bytes(ex.slow, ti, tj);
  }
  void bind(std::byte*& cur, std::size_t ti, std::size_t tj) {
    if (e.use_fast) gf.bind(cur, ti, tj);
    else gs.bind(cur, ti, tj);
  }
  void fill(std::size_t i0, std::size_t ni, std::size_t j0, std::size_t nj, T* out, std::size_t ld) {
    if (e.use_fast) gf.fill(i0, ni, j0, nj, out, ld);
    else gs.fill(i0, ni, j0, nj, out, ld);
  }
};

// ---- diagonal terms: the tile adds the diagonal entries that fall inside it ---------------------
template <class E, class Dg>
struct tile_gen<diag_plus<E, Dg>> : child_gen<diag_plus<E, Dg>, E> {
  using base = child_gen<diag_plus<E, Dg>, E>;
  using typename base::T;
  using base::base;
  using base::child;
  using base::e;
  void fill(std::size_t i0, std::size_t ni, std::size_t j0, std::size_t nj, T* out, std::size_t ld) {
    child.fill(i0, ni, j0, nj, out, ld);
    const std::size_t lo = std::max(i0, j0), hi = std::min(i0 + ni, j0 + nj);
    for (std::size_t i = lo; i < hi; ++i) out[(i - i0) * ld + (i - j0)] += e.d.template at<T>(i);
  }
};

}  // namespace memsafe::host

