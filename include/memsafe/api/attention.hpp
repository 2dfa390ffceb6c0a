// memsafe/api/attention.hpp — the entry points of attention on the host: eval_into (forward) and
// attention_backward. The expression is captured by expr/attention.hpp (softmax_sum(scale ·
// dot(Q, K) + masks, V)) and run by backend/host/attention.hpp.
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>

#include "../backend/host/attention.hpp"
#include "../expr/attention.hpp"
#include "../plan/options.hpp"

namespace memsafe {

namespace detail {
template <class T, class U>
void check_heads(const heads_view<U>& x, std::size_t B, std::size_t H, std::size_t Tn, std::size_t d,
                 const char* name, const char* where) {
  if (x.batch() != B || x.heads() != H || x.length() != Tn || x.dim() != d)
    throw shape_error(std::string("memsafe: ") + where + ": " + name + " is " + x.shape() + " but must be [" +
                      std::to_string(B) + ", " + std::to_string(H) + ", " + std::to_string(Tn) + ", " +
                      std::to_string(d) + "]");
}
}  // namespace detail

/// Attention forward: O[b, h] = softmax(S[b, h]) V[b, h] into O ([B, H, Tq, dv], any strides), and
/// the row logsumexp of S into lse (contiguous [B, H, Tq]; nullptr when not wanted; the backward
/// needs it). A row whose every key is masked has O = 0 and lse = −inf. Temporaries stay within
/// the budget (o.budget, MEMSAFE_BUDGET, or the default); budget_error before any work when even
/// one worker at one query row does not fit.
template <class T>
eval_stats eval_into(const detail::attention_expr<T>& a, std::type_identity_t<heads_view<T>> O, std::type_identity_t<T*> lse,
                     const options& o = {}) {
  detail::check_heads<T>(O, a.batch(), a.heads(), a.queries(), a.value_dim(), "O", "eval_into(attention)");
  return detail::attn::forward(a, O, lse, o);
}

/// Attention backward (the FlashAttention-2 scheme): from dO = ∂L/∂O and the forward's O and lse,
/// writes dQ ([B, H, Tq, d]), dK ([B, H, Tk, d]) and dV ([B, H, Tk, dv]) — any strides — recomputing
/// each score tile from lse (P = exp(S − lse), D = rowsum(dO ∘ O), dS = P ∘ (dO Vᵀ − D)). The
/// gradient of the bias (dS itself) is not returned; masked entries have zero gradient. Same
/// budget rules as the forward.
template <class T>
eval_stats attention_backward(const detail::attention_expr<T>& a, std::type_identity_t<heads_view<const T>> O,
                              std::type_identity_t<const T*> lse, std::type_identity_t<heads_view<const T>> dO,
                              std::type_identity_t<heads_view<T>> dQ, std::type_identity_t<heads_view<T>> dK,
                              std::type_identity_t<heads_view<T>> dV, const options& o = {}) {
  const char* where = "attention_backward";
  detail::check_heads<T>(O, a.batch(), a.heads(), a.queries(), a.value_dim(), "O", where);
  detail::check_heads<T>(dO, a.batch(), a.heads(), a.queries(), a.value_dim(), "dO", where);
  detail::check_heads<T>(dQ, a.batch(), a.heads(), a.queries(), a.dim(), "dQ", where);
  detail::check_heads<T>(dK, a.batch(), a.heads(), a.keys(), a.dim(), "dK", where);
  detail::check_heads<T>(dV, a.batch(), a.heads(), a.keys(), a.value_dim(), "dV", where);
  if (!lse && a.batch() * a.heads() * a.queries() != 0)
    throw argument_error("memsafe: attention_backward: null lse (pass the forward's logsumexp)");
  return detail::attn::backward(a, O, lse, dO, dQ, dK, dV, o);
}

}  // namespace memsafe
