// memsafe/expr/tensor.hpp — broadcast tensors: the naive NumPy form of pairwise computations.
//
// Users coming from NumPy write a distance as
//     ((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1)
// which materialises an n×m×d broadcast. Here the same text is captured lazily:
//     memsafe::sum<2>(memsafe::square(memsafe::unsqueeze<1>(X) - memsafe::unsqueeze<0>(Y)))
// and the rewrite stage (rewrite/broadcast.hpp) replaces the exact pattern by the pairwise
// squared distance. Anything else (a sum over another axis, a cube, a product of different
// operands) stays a broadcast tensor and is evaluated element by element inside the tiles: the
// n×m×d tensor never exists either way.
//
// Leading batch axes are allowed: for b×n×d inputs, unsqueeze<2>(X) - unsqueeze<1>(Y) is
// b×n×m×d, its sum over the last axis a batch of b lazy n×m matrices (`batched_sum`).
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "lazy.hpp"
#include "view.hpp"

namespace memsafe {

/// Marker base of broadcast-tensor nodes (memsafe::detail); here for argument-dependent lookup, as
/// lazy_tag (expr/lazy.hpp).
struct tensor_tag {};

namespace detail {
template <class E>
concept tensor_expr = std::is_base_of_v<tensor_tag, std::remove_cvref_t<E>>;

inline constexpr std::size_t no_axis = ~std::size_t{0};
}  // namespace detail

/// A read-only strided tensor over caller memory (row-major by default).
template <class T, std::size_t R>
struct tensor_view {
  static_assert(real<T>, "memsafe: tensors hold float or double");
  static_assert(R >= 1, "memsafe: a tensor has at least one axis");
  const T* data = nullptr;
  std::array<std::size_t, R> shape{};
  std::array<std::size_t, R> strides{};
};

namespace detail {
/// Every tensor_view the library takes is checked here (its fields are public, so one built by hand
/// is checked where it is used): extents and strides as every view (view.hpp, check_extents), and
/// no null data pointer with elements.
template <class T, std::size_t R>
void check_tensor(const tensor_view<T, R>& t, const char* what) {
  check_extents(t.shape.data(), t.strides.data(), R, sizeof(T), what);
  std::size_t count = 1;
  for (std::size_t e : t.shape) count *= e;  // cannot wrap: check_extents refused that
  check_data(t.data, count, what);
}
}  // namespace detail

/// `tensor(ptr, {b, n, d})`: a contiguous row-major tensor.
template <real T, std::size_t R>
tensor_view<T, R> tensor(const T* data, const std::size_t (&dims)[R]) {
  tensor_view<T, R> t;
  t.data = data;
  std::size_t count = 1;
  for (std::size_t a = R; a-- > 0;) {
    t.shape[a] = dims[a];
    t.strides[a] = count;
    count *= dims[a];  // may wrap: check_tensor refuses the shape first
  }
  detail::check_tensor(t, "tensor");
  return t;
}
/// `tensor(ptr, {b, n, d}, {sb, sn, sd})`: a tensor with the given element strides (0 broadcasts
/// an axis over the same memory).
template <real T, std::size_t R>
tensor_view<T, R> tensor(const T* data, const std::size_t (&dims)[R], const std::size_t (&strides)[R]) {
  tensor_view<T, R> t;
  t.data = data;
  for (std::size_t a = 0; a < R; ++a) t.shape[a] = dims[a], t.strides[a] = strides[a];
  detail::check_tensor(t, "tensor");
  return t;
}

namespace detail {
template <std::size_t N>
std::string dims_str(const std::array<std::size_t, N>& s) {
  std::string r;
  for (std::size_t a = 0; a < N; ++a) {
    if (a) r += "×";
    r += msg_piece(s[a]).view();
  }
  return r;
}

/// Leaf: a rank-R source with a size-1 axis inserted at position A (A == no_axis: none), so its
/// rank is R+1 (or R). D is the static extent of the last axis (dyn if unknown). Size-1 axes
/// broadcast: their index is ignored.
template <class T, std::size_t R, std::size_t A, std::size_t D = dyn>
struct tleaf : tensor_tag {
  using value_type = T;
  static constexpr std::size_t source_rank = R, inserted = A;
  static constexpr std::size_t rank = A == no_axis ? R : R + 1;
  static constexpr std::size_t static_last = D;
  static_assert(A == no_axis || A <= R, "memsafe: unsqueeze<A>: the new axis must be at most the tensor's rank");
  const T* data = nullptr;
  std::array<std::size_t, R> src_shape{};
  std::array<std::size_t, R> src_strides{};

  static constexpr std::size_t full_axis(std::size_t s) {
    if constexpr (A == no_axis) return s;
    else if constexpr (A == 0) return s + 1;  // (s >= 0 is nvcc's "pointless comparison" warning)
    else return s >= A ? s + 1 : s;
  }
  std::array<std::size_t, rank> shape() const {
    std::array<std::size_t, rank> sh{};
    for (std::size_t a = 0; a < rank; ++a) sh[a] = 1;
    for (std::size_t s = 0; s < R; ++s) sh[full_axis(s)] = src_shape[s];
    return sh;
  }
  /// Element strides per full axis; 0 on the inserted axis and on size-1 axes (broadcasting).
  std::array<std::size_t, rank> eff_strides() const {
    std::array<std::size_t, rank> st{};
    for (std::size_t s = 0; s < R; ++s) st[full_axis(s)] = src_shape[s] == 1 ? 0 : src_strides[s];
    return st;
  }
  MEMSAFE_COLD std::string str() const {
    if constexpr (A != no_axis) return cat(msg{"T[", detail::dims_str(src_shape), "].unsqueeze(", A, ")"});
    else return cat(msg{"T[", detail::dims_str(src_shape), "]"});
  }
};

/// op(e) elementwise.
template <class Op, class E>
struct tmap : tensor_tag {
  using value_type = typename E::value_type;
  static constexpr std::size_t rank = E::rank, static_last = E::static_last;
  E e;
  Op op;
  auto shape() const { return e.shape(); }
  MEMSAFE_COLD std::string str() const { return detail::op_str(op, e.str()); }
};

/// op(a, b) with NumPy broadcasting (equal ranks; each axis equal or 1).
template <class Op, class A, class B>
struct tzip : tensor_tag {
  using value_type = typename A::value_type;
  static constexpr std::size_t rank = A::rank;
  static constexpr std::size_t static_last = A::static_last != dyn ? A::static_last : B::static_last;
  A a;
  B b;
  Op op;
  std::array<std::size_t, rank> shape() const {
    auto sa = a.shape(), sb = b.shape();
    for (std::size_t x = 0; x < rank; ++x) sa[x] = sa[x] == 1 ? sb[x] : sa[x];
    return sa;
  }
  MEMSAFE_COLD std::string str() const { return cat(msg{"(", a.str(), " ", Op::name, " ", b.str(), ")"}); }
};
}  // namespace detail

// ---- building ----------------------------------------------------------------------------------

/// Insert a size-1 axis at position A (NumPy's X[:, None, :] is unsqueeze<1>(X)).
template <std::size_t A, class T, std::size_t RR, std::size_t C>
auto unsqueeze(const matrix_view<T, RR, C>& m) {
  static_assert(A <= 2, "memsafe: unsqueeze<A> of a matrix: A must be 0, 1 or 2");
  using V = std::remove_cv_t<T>;
  return detail::tleaf<V, 2, A, (A == 2 ? std::size_t(1) : C)>{{}, m.data(), {m.rows(), m.cols()},
                                                                {m.row_stride(), m.col_stride()}};
}
template <std::size_t A, class T, std::size_t R>
auto unsqueeze(const tensor_view<T, R>& t) {
  static_assert(A <= R, "memsafe: unsqueeze<A>: A must be at most the tensor's rank");
  detail::check_tensor(t, "unsqueeze");
  return detail::tleaf<T, R, A, (A == R ? std::size_t(1) : dyn)>{{}, t.data, t.shape, t.strides};
}
/// A matrix or tensor as a broadcast operand without a new axis.
template <class T, std::size_t RR, std::size_t C>
auto as_tensor(const matrix_view<T, RR, C>& m) {
  using V = std::remove_cv_t<T>;
  return detail::tleaf<V, 2, detail::no_axis, C>{{}, m.data(), {m.rows(), m.cols()}, {m.row_stride(), m.col_stride()}};
}
template <class T, std::size_t R>
auto as_tensor(const tensor_view<T, R>& t) {
  detail::check_tensor(t, "as_tensor");
  return detail::tleaf<T, R, detail::no_axis, dyn>{{}, t.data, t.shape, t.strides};
}

namespace detail {
template <class E>
concept pure_tensor = tensor_expr<E> && !lazy_matrix<E>;

template <class Op, class A, class B>
auto make_tzip(const A& a, const B& b, const char* opname) {
  static_assert(A::rank == B::rank,
                "memsafe: broadcast: the operands have different ranks; insert the missing axes with "
                "unsqueeze<A> so both have the same number of axes");
  static_assert(extents_compatible<A::static_last, B::static_last> || A::static_last == 1 || B::static_last == 1,
                "memsafe: broadcast: the last (feature) axes have different static extents");
  static_assert(std::is_same_v<typename A::value_type, typename B::value_type>,
                "memsafe: broadcast: operands of different value types (both float or both double)");
  const auto sa = a.shape(), sb = b.shape();
  for (std::size_t x = 0; x < A::rank; ++x)
    if (sa[x] != sb[x] && sa[x] != 1 && sb[x] != 1)
      throw shape_error(cat(msg{"memsafe: broadcast '", opname, "': shapes ", dims_str(sa), " and ", dims_str(sb),
                             " differ on axis ", x, " (", sa[x], " vs ", sb[x], ") and neither is 1"}));
  return tzip<Op, A, B>{{}, a, b, {}};
}
template <class Op, class E>
auto make_tmap(const E& e, Op op = {}) {
  return tmap<Op, E>{{}, e, op};
}
}  // namespace detail

template <detail::pure_tensor A, detail::pure_tensor B>
auto operator+(const A& a, const B& b) { return detail::make_tzip<op::add>(a, b, "+"); }
template <detail::pure_tensor A, detail::pure_tensor B>
auto operator-(const A& a, const B& b) { return detail::make_tzip<op::sub>(a, b, "-"); }
template <detail::pure_tensor A, detail::pure_tensor B>
auto operator*(const A& a, const B& b) { return detail::make_tzip<op::mul>(a, b, "*"); }
template <detail::pure_tensor A, detail::pure_tensor B>
auto operator/(const A& a, const B& b) { return detail::make_tzip<op::div>(a, b, "/"); }

template <detail::pure_tensor E, detail::scalar S>
auto operator*(const E& e, S c) { return detail::make_tmap(e, op::mul_scalar<double>{static_cast<double>(c)}); }
template <detail::pure_tensor E, detail::scalar S>
auto operator*(S c, const E& e) { return e * c; }
template <detail::pure_tensor E, detail::scalar S>
auto operator+(const E& e, S c) { return detail::make_tmap(e, op::add_scalar<double>{static_cast<double>(c)}); }
template <detail::pure_tensor E, detail::scalar S>
auto operator-(const E& e, S c) { return detail::make_tmap(e, op::add_scalar<double>{-static_cast<double>(c)}); }
template <detail::pure_tensor E, detail::scalar S>
auto operator/(const E& e, S c) { return detail::make_tmap(e, op::div_scalar<double>{static_cast<double>(c)}); }
template <detail::pure_tensor E>
auto operator-(const E& e) { return detail::make_tmap<op::neg>(e); }
template <detail::pure_tensor E>
auto square(const E& e) { return detail::make_tmap<op::square>(e); }
template <detail::pure_tensor E>
auto abs(const E& e) { return detail::make_tmap<op::abs>(e); }
template <detail::pure_tensor E>
auto exp(const E& e) { return detail::make_tmap<op::exp>(e); }
template <detail::pure_tensor E>
auto sqrt(const E& e) { return detail::make_tmap<op::sqrt>(e); }
template <detail::pure_tensor E, detail::scalar S>
auto pow(const E& e, S p) { return detail::make_tmap(e, op::pow_scalar<double>{static_cast<double>(p)}); }

// ---- sum over one axis -------------------------------------------------------------------------

namespace detail {
/// Σ over axis Ax of a rank-3 broadcast tensor: an n×m lazy matrix (the two remaining axes in
/// order). Entries are computed on demand, one pair at a time.
/// With Swap the remaining axes are taken in reverse order (the transpose).
template <std::size_t Ax, class E, bool Swap = false>
struct tsum : lazy_tag {
  using value_type = typename E::value_type;
  static_assert(E::rank == 3, "memsafe: internal: tsum is over a rank-3 tensor");
  static constexpr std::size_t axis = Ax;
  static constexpr std::size_t lo_axis = Ax == 0 ? 1 : 0, hi_axis = Ax == 2 ? 1 : 2;
  static constexpr std::size_t row_axis = Swap ? hi_axis : lo_axis, col_axis = Swap ? lo_axis : hi_axis;
  static constexpr std::size_t static_rows = dyn, static_cols = dyn;
  E e;
  std::size_t rows() const { return e.shape()[row_axis]; }
  std::size_t cols() const { return e.shape()[col_axis]; }
  std::size_t reduced() const { return e.shape()[Ax]; }
  MEMSAFE_COLD std::string str() const {
    return cat(msg{Swap ? "transpose(" : "", "sum<", Ax, ">(", e.str(), ")", Swap ? ")" : ""});
  }
};

/// Σ over axis Ax (≥ 1 from the last three) of a tensor with leading batch axes: a batch of
/// lazy matrices, indexed by the flattened batch index.
template <std::size_t Ax, class E>
struct batched_sum {
  using value_type = typename E::value_type;
  static constexpr std::size_t batch_axes = E::rank - 3;
  static_assert(Ax >= batch_axes, "memsafe: sum<A> over a leading batch axis of a broadcast tensor is not supported");
  E e;
  std::size_t batch() const {
    auto s = e.shape();
    std::size_t b = 1;
    for (std::size_t a = 0; a < batch_axes; ++a) b = checked_mul(b, s[a], "memsafe: sum<A>(broadcast tensor): the batch");
    return b;
  }
  MEMSAFE_COLD std::string str() const { return cat(msg{"sum<", Ax, ">(", e.str(), ")"}); }
};

template <class>
struct is_batched : std::false_type {};
template <std::size_t Ax, class E>
struct is_batched<batched_sum<Ax, E>> : std::true_type {};
}  // namespace detail

/// `sum<Axis>(t)`: for a rank-3 tensor an n×m lazy matrix; for higher ranks a batch of them.
template <std::size_t Ax, detail::pure_tensor E>
auto sum(const E& e) {
  static_assert(E::rank >= 3, "memsafe: sum<A>(broadcast tensor) needs a tensor of rank ≥ 3 (n×m×d, optionally batched)");
  static_assert(Ax < E::rank, "memsafe: sum<A>: the axis is out of range");
  if constexpr (E::rank == 3) {
    return detail::tsum<Ax, E>{{}, e};
  } else {
    const detail::batched_sum<Ax, E> b{e};
    // the batch axes broadcast against each other: their product is checked here, where it is
    // formed (each tensor's own count was checked when it was made)
    (void)b.batch();
    return b;
  }
}

// ---- slicing leading batch axes ---------------------------------------------------------------

namespace detail {
template <std::size_t NB, class Op, class E>
auto slice_front(const tmap<Op, E>& m, const std::size_t* idx);
template <std::size_t NB, class Op, class A, class B>
auto slice_front(const tzip<Op, A, B>& z, const std::size_t* idx);
/// Fix the first NB full axes of a tensor expression at `idx` (NB values): a tensor of rank −NB.
template <std::size_t NB, class T, std::size_t R, std::size_t A, std::size_t D>
auto slice_front(const tleaf<T, R, A, D>& l, const std::size_t* idx) {
  // Source axes that are batch axes: those whose full position is < NB.
  constexpr std::size_t drop = (A != no_axis && A < NB) ? NB - 1 : NB;
  constexpr std::size_t A2 = (A == no_axis || A < NB) ? no_axis : A - NB;
  tleaf<T, R - drop, A2, D> out;
  const T* p = l.data;
  for (std::size_t s = 0; s < drop; ++s) {
    const std::size_t fa = tleaf<T, R, A, D>::full_axis(s);
    if (l.src_shape[s] != 1) p += idx[fa] * l.src_strides[s];
  }
  out.data = p;
  for (std::size_t s = drop; s < R; ++s) {
    out.src_shape[s - drop] = l.src_shape[s];
    out.src_strides[s - drop] = l.src_strides[s];
  }
  return out;
}
template <std::size_t NB, class Op, class E>
auto slice_front(const tmap<Op, E>& m, const std::size_t* idx) {
  auto c = slice_front<NB>(m.e, idx);
  return tmap<Op, decltype(c)>{{}, c, m.op};
}
template <std::size_t NB, class Op, class A, class B>
auto slice_front(const tzip<Op, A, B>& z, const std::size_t* idx) {
  auto a = slice_front<NB>(z.a, idx);
  auto b = slice_front<NB>(z.b, idx);
  return tzip<Op, decltype(a), decltype(b)>{{}, a, b, z.op};
}

/// The lazy n×m matrix of batch entry `b` (flattened over the batch axes, row-major). With a batch
/// extent of 0 (no entries) entry 0 is still formed, for its shape: its views start at the data
/// pointer and nothing reads them.
template <std::size_t Ax, class E>
auto slice(const batched_sum<Ax, E>& s, std::size_t b) {
  constexpr std::size_t NB = batched_sum<Ax, E>::batch_axes;
  const auto sh = s.e.shape();
  std::size_t idx[NB > 0 ? NB : 1] = {};
  for (std::size_t a = NB; a-- > 0;) {
    if (sh[a] == 0) {
      idx[a] = b = 0;
      continue;
    }
    idx[a] = b % sh[a];
    b /= sh[a];
  }
  auto c = slice_front<NB>(s.e, idx);
  return tsum<Ax - NB, decltype(c)>{{}, c};
}
}  // namespace detail

}  // namespace memsafe
