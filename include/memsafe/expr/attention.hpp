// memsafe/expr/attention.hpp — attention written the naive way (capture stage):
//
//     auto Q = memsafe::heads(q, B, H, T, d);          // [B, H, T, d] views, any strides
//     auto A = memsafe::softmax_sum(scale * memsafe::dot(Q, K) + memsafe::causal, V);
//     memsafe::eval_into(A, O, lse, opts);              // <memsafe/attention.hpp>
//
// `dot(Q, K)` of two heads_view is the batch of score matrices S[b, h] = Q[b, h] · K[b, h]ᵀ as a
// lazy node (attention_scores); a scalar factor, `+ causal`, `+ key_padding(keep, B, Tk)` and
// `+ bias` (a heads_view of [B or 1, H or 1, Tq, Tk]) add to that node, and `softmax_sum(scores,
// V)` makes the evaluable attention_expr. Overload resolution recognises the whole spelling at
// compile time; nothing is computed, and the Tq×Tk score matrices never exist (the host backend,
// backend/host/attention.hpp, evaluates the node as the online-softmax reduction tile by tile).
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/libm.hpp"
#include "lazy.hpp"
#include "overlap.hpp"
#include "view.hpp"

namespace memsafe {

/// A batch of per-head matrices over caller memory: extents [B, H, T, d], element (b, h, t, c) at
/// data[b·sb + h·sh + t·st + c·sc]. Any strides, so a [B, T, H, d] buffer (a fused projection's
/// output) is viewed without a copy (`heads_bthd`). A stride of 0 broadcasts (bias over a batch).
template <class T>
class heads_view {
  static_assert(real<T>, "memsafe: heads_view holds float or double");

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;

  heads_view(T* data, std::size_t B, std::size_t H, std::size_t Tn, std::size_t d, std::size_t sb, std::size_t sh,
             std::size_t st, std::size_t sc)
      : p_(data), n_{B, H, Tn, d}, s_{sb, sh, st, sc} {
    detail::check_extents(n_, s_, 4, sizeof(T), "heads_view");
    const std::size_t count = B * H * Tn * d;  // checked above
    detail::check_data(data, count, "heads_view");
  }
  /// Conversion to a view over const data.
  template <class U>
    requires std::is_same_v<const U, T>
  heads_view(const heads_view<U>& o)
      : p_(o.data()), n_{o.batch(), o.heads(), o.length(), o.dim()},
        s_{o.stride(0), o.stride(1), o.stride(2), o.stride(3)} {}

  T* data() const { return p_; }
  std::size_t batch() const { return n_[0]; }
  std::size_t heads() const { return n_[1]; }
  std::size_t length() const { return n_[2]; }  ///< T: rows of each per-head matrix
  std::size_t dim() const { return n_[3]; }     ///< d: columns of each per-head matrix
  std::size_t extent(int k) const { return n_[k]; }
  std::size_t stride(int k) const { return s_[k]; }
  /// The (b, h) matrix's row t.
  T* row(std::size_t b, std::size_t h, std::size_t t) const { return p_ + b * s_[0] + h * s_[1] + t * s_[2]; }
  T& operator()(std::size_t b, std::size_t h, std::size_t t, std::size_t c) const { return row(b, h, t)[c * s_[3]]; }
  std::string shape() const {
    return detail::cat(detail::msg{"[", n_[0], ", ", n_[1], ", ", n_[2], ", ", n_[3], "]"});
  }

 private:
  T* p_;
  std::size_t n_[4];
  std::size_t s_[4];
};

/// [B, H, T, d] stored contiguously in that order.
template <class T>
  requires real<std::remove_cv_t<T>>
heads_view<T> heads(T* data, std::size_t B, std::size_t H, std::size_t Tn, std::size_t d) {
  return {data, B, H, Tn, d, H * Tn * d, Tn * d, d, 1};
}
/// [B, H, T, d] over memory stored as [B, T, H, d] (row (b, t) holds every head's d values one
/// after another, e.g. a slice of a fused QKV projection): no copy. `row_stride` is the distance
/// between consecutive t (H·d when the buffer holds one of Q, K, V; 3·H·d for a fused [B, T, 3, H, d]
/// buffer, with `data` pointing at the first element of Q, K or V).
template <class T>
  requires real<std::remove_cv_t<T>>
heads_view<T> heads_bthd(T* data, std::size_t B, std::size_t Tn, std::size_t H, std::size_t d,
                         std::size_t row_stride = 0) {
  const std::size_t rs = row_stride ? row_stride : H * d;
  return {data, B, H, Tn, d, Tn * rs, d, rs, 1};
}

/// The causal mask: query i sees key j only when j ≤ i + (Tk − Tq) (aligned at the bottom right,
/// so j ≤ i when Tq = Tk). Spelled `scores + memsafe::causal`.
struct causal_t {};
inline constexpr causal_t causal{};

/// Key-padding mask: `keep[b · batch_stride + j]` nonzero keeps key j of batch b (for every
/// head and query); zero masks it. Spelled `scores + memsafe::key_padding(keep, B, Tk)`.
struct key_padding_mask {
  const unsigned char* keep;
  std::size_t batch, keys, batch_stride;
};
inline key_padding_mask key_padding(const unsigned char* keep, std::size_t B, std::size_t Tk,
                                    std::size_t batch_stride = 0) {
  detail::check_data(keep, B * Tk, "key_padding");
  return {keep, B, Tk, batch_stride ? batch_stride : Tk};
}
inline key_padding_mask key_padding(const bool* keep, std::size_t B, std::size_t Tk, std::size_t batch_stride = 0) {
  static_assert(sizeof(bool) == 1, "memsafe: key_padding(bool*) needs a one-byte bool");
  return key_padding(reinterpret_cast<const unsigned char*>(keep), B, Tk, batch_stride);
}

/// Dropout on the attention weights: `softmax_sum(scores, V, memsafe::dropout(p, seed))` keeps each
/// weight P[b, h, i, j] with probability 1 − p, scaled by 1/(1 − p), and zeroes the others (as
/// training-time dropout in a transformer). Which weights are kept is a function of (seed, b, h, i,
/// j) alone (dropout_keeps), so the backward sees the same mask as the forward, at every budget and
/// thread count. 0 ≤ p < 1; p = 0 is no dropout.
struct dropout_spec {
  double p;
  std::uint64_t seed;
};
namespace detail {
inline void check_dropout(double p) {
  if (!(p >= 0 && p < 1)) throw argument_error(cat(msg{"memsafe: dropout(p, seed): p must be in [0, 1), got ", p}));
}
}  // namespace detail
inline dropout_spec dropout(double p, std::uint64_t seed) {
  detail::check_dropout(p);
  return {p, seed};
}

namespace detail {
/// murmur3's 32-bit finaliser and splitmix64's: bijections with full avalanche.
inline std::uint32_t fmix32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x;
}
inline std::uint64_t fmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
/// The dropout key of query row (b, h, i), computed once per row.
inline std::uint32_t dropout_row_key(std::uint64_t seed, std::size_t b, std::size_t h, std::size_t i) {
  const std::uint64_t x = fmix64(seed ^ fmix64(b ^ fmix64(h ^ fmix64(i))));
  return static_cast<std::uint32_t>(x ^ (x >> 32));
}
/// The 32-bit draw of key j in the row whose key is rk: uniform over [0, 2³²) (keys j and j + 2³²
/// share one).
inline std::uint32_t dropout_draw(std::uint32_t rk, std::uint32_t j) { return fmix32(rk ^ (j * 0x9e3779b9u)); }
/// A draw below this drops the weight: p·2³² rounded down (so a weight is kept with probability
/// 1 − ⌊p·2³²⌋/2³²).
inline std::uint32_t dropout_threshold(double p) { return static_cast<std::uint32_t>(p * 4294967296.0); }
}  // namespace detail

/// Whether `dropout(p, seed)` keeps the weight of query i and key j of head (b, h).
inline bool dropout_keeps(const dropout_spec& dr, std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
  return detail::dropout_draw(detail::dropout_row_key(dr.seed, b, h, i), static_cast<std::uint32_t>(j)) >=
         detail::dropout_threshold(dr.p);
}

/// Marker base of the attention capture nodes (in memsafe::detail), so that argument-dependent
/// lookup finds the operators below (as lazy_tag does for lazy matrices).
struct attention_tag {};

namespace detail {

/// The batch of score matrices scale · Q Kᵀ (+ bias) with masks: a capture node, never formed.
template <class T>
struct attention_scores : attention_tag {
  using value_type = T;
  heads_view<const T> q, k;
  double scale = 1;
  bool is_causal = false;
  const unsigned char* keep = nullptr;  ///< key padding (nullptr: none)
  std::size_t keep_stride = 0;
  bool has_bias = false;
  heads_view<const T> bias{nullptr, 0, 0, 0, 0, 0, 0, 0, 0};

  MEMSAFE_COLD std::string str() const {
    std::string s = scale != 1 ? cat(msg{scale, " * dot(Q", q.shape(), ", K", k.shape(), ")"})
                               : cat(msg{"dot(Q", q.shape(), ", K", k.shape(), ")"});
    if (has_bias) s += cat(msg{" + bias", bias.shape()});
    if (keep) s += " + key_padding";
    if (is_causal) s += " + causal";
    return s;
  }
};

/// softmax_sum(scores, V): out[b, h, i] = Σ_j softmax_j(S[b, h, i, j]) V[b, h, j], and the
/// per-row logsumexp of S. Evaluated by eval_into (api/attention.hpp).
template <class T>
struct attention_expr : attention_tag {
  using value_type = T;
  attention_scores<T> s;
  heads_view<const T> v;
  dropout_spec drop{0, 0};  ///< p = 0: none
  std::size_t batch() const { return s.q.batch(); }
  std::size_t heads() const { return s.q.heads(); }
  std::size_t queries() const { return s.q.length(); }
  std::size_t keys() const { return s.k.length(); }
  std::size_t dim() const { return s.q.dim(); }
  std::size_t value_dim() const { return v.dim(); }
  MEMSAFE_COLD std::string str() const {
    if (drop.p > 0) return cat(msg{"softmax_sum(", s.str(), ", V", v.shape(), ", dropout(", drop.p, "))"});
    return cat(msg{"softmax_sum(", s.str(), ", V", v.shape(), ")"});
  }
};

/// The memory of a heads view, and the inputs an attention evaluation reads (Q, K, V, the bias
/// and the key-padding mask), for the overlap checks (expr/overlap.hpp).
template <class T>
mem_block block_of(const heads_view<T>& h) {
  const std::size_t e[4] = {h.batch(), h.heads(), h.length(), h.dim()};
  const std::size_t s[4] = {h.stride(0), h.stride(1), h.stride(2), h.stride(3)};
  return {h.data(), sizeof(T), 4, e, s};
}
template <class T>
void attention_inputs(const attention_expr<T>& a, named_block* in) {  // in[0..5)
  const std::size_t e[2] = {a.batch(), a.keys()}, s[2] = {a.s.keep_stride, 1};
  in[0] = {"Q", block_of(a.s.q)};
  in[1] = {"K", block_of(a.s.k)};
  in[2] = {"V", block_of(a.v)};
  in[3] = {"bias", a.s.has_bias ? block_of(a.s.bias) : mem_block{}};
  in[4] = {"key_padding", a.s.keep ? mem_block(a.s.keep, 1, 2, e, s) : mem_block{}};
}

template <class>
inline constexpr bool is_heads_view = false;
template <class T>
inline constexpr bool is_heads_view<heads_view<T>> = true;

}  // namespace detail

/// The batch of score matrices Q[b, h] · K[b, h]ᵀ (lazy). Q: [B, H, Tq, d], K: [B, H, Tk, d].
template <class T, class U>
detail::attention_scores<std::remove_cv_t<T>> dot(const heads_view<T>& Q, const heads_view<U>& K) {
  static_assert(std::is_same_v<std::remove_cv_t<T>, std::remove_cv_t<U>>,
                "memsafe: dot(Q, K) of heads: Q and K must have the same value type");
  if (Q.batch() != K.batch() || Q.heads() != K.heads() || Q.dim() != K.dim())
    throw shape_error(detail::cat(detail::msg{"memsafe: dot(Q, K): Q is ", Q.shape(), " and K is ", K.shape(),
                                              " [B, H, T, d]: B, H and d must agree"}));
  detail::attention_scores<std::remove_cv_t<T>> s{{}, heads_view<const std::remove_cv_t<T>>(Q),
                                                  heads_view<const std::remove_cv_t<T>>(K)};
  return s;
}

namespace detail {
inline void check_scale(double c, bool has_bias) {
  if (!libm::isfinite(c)) throw argument_error("memsafe: attention scores: the scale must be finite");
  if (has_bias)
    throw argument_error("memsafe: attention scores: write the scale on the product, before the bias: "
                         "scale * dot(Q, K) + bias");
}
}  // namespace detail

/// scale · Q Kᵀ.
template <class T, detail::scalar S>
detail::attention_scores<T> operator*(S c, detail::attention_scores<T> s) {
  detail::check_scale(static_cast<double>(c), s.has_bias);
  s.scale *= static_cast<double>(c);
  // each factor finite, their product too, and in T (the kernels scale in T): 1e39 · dot(Q, K) is
  // finite as a double but not as a float
  if (!(libm::fabs(s.scale) <= static_cast<double>(std::numeric_limits<T>::max())))
    throw argument_error(detail::cat(detail::msg{"memsafe: attention scores: the scale ", s.scale,
                                                 " is not finite in the value type; the scale must be finite"}));
  return s;
}
template <class T, detail::scalar S>
detail::attention_scores<T> operator*(detail::attention_scores<T> s, S c) {
  return c * s;
}
template <class T, detail::scalar S>
detail::attention_scores<T> operator/(detail::attention_scores<T> s, S c) {
  return (1.0 / static_cast<double>(c)) * s;
}
/// + causal.
template <class T>
detail::attention_scores<T> operator+(detail::attention_scores<T> s, causal_t) {
  if (s.is_causal) throw argument_error("memsafe: attention scores: the causal mask is added twice");
  s.is_causal = true;
  return s;
}
/// + key_padding(keep, B, Tk).
template <class T>
detail::attention_scores<T> operator+(detail::attention_scores<T> s, const key_padding_mask& m) {
  if (s.keep) throw argument_error("memsafe: attention scores: a key-padding mask is added twice");
  if (m.batch != s.q.batch() || m.keys != s.k.length())
    throw shape_error(detail::cat(detail::msg{"memsafe: attention scores + key_padding: the mask is ", m.batch, "×",
                                              m.keys, " but the scores have B = ", s.q.batch(), " and Tk = ",
                                              s.k.length()}));
  s.keep = m.keep;
  s.keep_stride = m.batch_stride;
  return s;
}
/// + bias, a heads_view [B or 1, H or 1, Tq, Tk] (extent 1 broadcasts); −inf entries mask.
template <class T, class U>
detail::attention_scores<T> operator+(detail::attention_scores<T> s, const heads_view<U>& bias) {
  static_assert(std::is_same_v<std::remove_cv_t<U>, T>,
                "memsafe: attention scores + bias: the bias must have the scores' value type");
  if (s.has_bias) throw argument_error("memsafe: attention scores: a bias is added twice");
  const bool okb = bias.batch() == s.q.batch() || bias.batch() == 1;
  const bool okh = bias.heads() == s.q.heads() || bias.heads() == 1;
  if (!okb || !okh || bias.length() != s.q.length() || bias.dim() != s.k.length())
    throw shape_error(detail::cat(detail::msg{"memsafe: attention scores + bias: the bias is ", bias.shape(),
                                              " but the scores are [", s.q.batch(), ", ", s.q.heads(), ", ",
                                              s.q.length(), ", ", s.k.length(), "] (B and H may be 1 to broadcast)"}));
  s.has_bias = true;
  s.bias = heads_view<const T>(bias.data(), bias.batch(), bias.heads(), bias.length(), bias.dim(),
                               bias.batch() == 1 ? 0 : bias.stride(0), bias.heads() == 1 ? 0 : bias.stride(1),
                               bias.stride(2), bias.stride(3));
  return s;
}
template <class T, class M>
  requires std::is_same_v<M, causal_t> || std::is_same_v<M, key_padding_mask> || detail::is_heads_view<M>
detail::attention_scores<T> operator+(const M& m, detail::attention_scores<T> s) {
  return s + m;
}

/// Attention: out[b, h, i] = Σ_j softmax_j(S[b, h, i, j]) V[b, h, j] for S = scale · Q Kᵀ (+ masks,
/// bias); V: [B, H, Tk, dv]. The online-softmax reduction: the scores are never formed.
template <class T, class VV>
detail::attention_expr<T> softmax_sum(const detail::attention_scores<T>& s, const VV& V) {
  static_assert(detail::is_heads_view<VV>,
                "memsafe: softmax_sum(scores, V) of heads: V must be a heads_view (memsafe::heads)");
  if constexpr (detail::is_heads_view<VV>) {
    static_assert(std::is_same_v<typename VV::value_type, T>,
                  "memsafe: softmax_sum(scores, V) of heads: V must have the scores' value type");
    if (V.batch() != s.q.batch() || V.heads() != s.q.heads() || V.length() != s.k.length())
      throw shape_error(detail::cat(detail::msg{"memsafe: softmax_sum(scores, V): K is ", s.k.shape(), " but V is ",
                                                V.shape(), " (V needs K's B, H and T)"}));
    return {{}, s, heads_view<const T>(V)};
  } else {
    return {{}, s, heads_view<const T>(nullptr, 0, 0, 0, 0, 0, 0, 0, 0)};
  }
}
/// The same with dropout on the attention weights (memsafe::dropout(p, seed)).
template <class T, class VV>
detail::attention_expr<T> softmax_sum(const detail::attention_scores<T>& s, const VV& V, const dropout_spec& dr) {
  detail::check_dropout(dr.p);
  detail::attention_expr<T> a = softmax_sum(s, V);
  a.drop = dr;
  return a;
}

}  // namespace memsafe
