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
    throw shape_error(
        cat(msg{"memsafe: ", where, ": ", name, " is ", x.shape(), " but must be [", B, ", ", H, ", ", Tn, ", ", d, "]"}));
}

/// argument_error naming the first entry of v (V) that is not finite. P·V (and the backward's
/// dO·Vᵀ) are accumulated tile by tile, and a key a row cannot see (causal, padding, a −inf bias)
/// still meets that row's products inside a tile it shares with visible keys, with P = 0: 0 · inf is
/// NaN, so a non-finite value would reach some rows and not others, depending on the budget's
/// tiles. One read of V, next to the products' Tq / 64 or more reads of it.
template <class T>
void check_values_finite(const heads_view<const T>& v, const char* name, const char* where) {
  const std::size_t dv = v.dim(), vs = v.stride(3);
  for (std::size_t b = 0; b < v.batch(); ++b)
    for (std::size_t h = 0; h < v.heads(); ++h)
      for (std::size_t j = 0; j < v.length(); ++j) {
        const T* row = v.row(b, h, j);
        const std::size_t c = first_nonfinite(row, dv, vs);
        if (c == dv) continue;
        throw argument_error(cat(msg{"memsafe: ", where, ": ", name, "[", b, ", ", h, ", ", j, ", ", c, "] is ",
                                     static_cast<double>(row[c * vs]), ": ", name,
                                     " must be finite (a masked entry would still meet the others of its tile)"}));
      }
}
}  // namespace detail

/// Attention forward: O[b, h] = softmax(S[b, h]) V[b, h] into O ([B, H, Tq, dv], any strides), and
/// the row logsumexp of S into lse (contiguous [B, H, Tq]; nullptr when not wanted; the backward
/// needs it). A row whose every key is masked has O = 0 and lse = −inf. V must be finite
/// (argument_error naming the entry; Q, K and the bias may hold NaN or ±inf, which give the rows
/// they reach NaN, as the naive formula does). Outputs must not overlap the inputs, one another or
/// themselves (argument_error). Temporaries stay within
/// the budget (o.budget, MEMSAFE_BUDGET, or the default); budget_error before any work when even
/// one worker at one query row does not fit.
template <real T>
eval_stats eval_into(const detail::attention_expr<T>& a, std::type_identity_t<heads_view<T>> O, std::type_identity_t<T*> lse,
                     const options& o = {}) {
  detail::check_heads<T>(O, a.batch(), a.heads(), a.queries(), a.value_dim(), "O", "eval_into(attention)");
  detail::named_block in[5];
  detail::attention_inputs(a, in);
  const detail::named_block out[2] = {{"O", detail::block_of(O)},
                                      {"lse", detail::contiguous_block(lse, a.batch() * a.heads() * a.queries())}};
  detail::check_apart(out, in, "eval_into(attention)");
  detail::check_values_finite(a.v, "V", "eval_into(attention)");
  return detail::attn::forward(a, O, lse, o);
}

namespace detail {
/// Both overloads of attention_backward: dBias null when the bias gradient is not wanted.
template <class T>
eval_stats attention_backward(const attention_expr<T>& a, heads_view<const T> O, const T* lse,
                              heads_view<const T> dO, heads_view<T> dQ, heads_view<T> dK, heads_view<T> dV,
                              const heads_view<T>* dBias, const options& o) {
  const char* where = "attention_backward";
  check_heads<T>(O, a.batch(), a.heads(), a.queries(), a.value_dim(), "O", where);
  check_heads<T>(dO, a.batch(), a.heads(), a.queries(), a.value_dim(), "dO", where);
  check_heads<T>(dQ, a.batch(), a.heads(), a.queries(), a.dim(), "dQ", where);
  check_heads<T>(dK, a.batch(), a.heads(), a.keys(), a.dim(), "dK", where);
  check_heads<T>(dV, a.batch(), a.heads(), a.keys(), a.value_dim(), "dV", where);
  if (dBias) {
    if (!a.s.has_bias)
      throw argument_error("memsafe: attention_backward: dBias is asked for but the scores have no bias");
    check_heads<T>(*dBias, a.s.bias.batch(), a.s.bias.heads(), a.queries(), a.keys(), "dBias", where);
  }
  if (!lse && a.batch() * a.heads() * a.queries() != 0)
    throw argument_error("memsafe: attention_backward: null lse (pass the forward's logsumexp)");
  named_block in[8];
  attention_inputs(a, in);
  in[5] = {"O", block_of(O)};
  in[6] = {"dO", block_of(dO)};
  in[7] = {"lse", contiguous_block(lse, a.batch() * a.heads() * a.queries())};
  const named_block out[4] = {{"dQ", block_of(dQ)}, {"dK", block_of(dK)}, {"dV", block_of(dV)},
                              {"dBias", dBias ? block_of(*dBias) : mem_block{}}};
  check_apart(out, in, where);
  check_values_finite(a.v, "V", where);
  return attn::backward(a, O, lse, dO, dQ, dK, dV, dBias, o);
}
}  // namespace detail

/// Attention backward (the FlashAttention-2 scheme): from dO = ∂L/∂O and the forward's O and lse,
/// writes dQ ([B, H, Tq, d]), dK ([B, H, Tk, d]) and dV ([B, H, Tk, dv]) — any strides — recomputing
/// each score tile from lse (P = exp(S − lse), D = rowsum(dO ∘ O), dS = P ∘ (dO Vᵀ − D)); masked
/// entries have zero gradient. Same budget rules as the forward. V must be finite (argument_error
/// naming the entry); a NaN row of O or dO (a forward row that was NaN) makes that row's dQ NaN and
/// the dK, dV of the keys its tiles meet. The outputs must not overlap the inputs, one another or
/// themselves (argument_error; packed layouts that share no element are fine).
template <class T>
eval_stats attention_backward(const detail::attention_expr<T>& a, std::type_identity_t<heads_view<const T>> O,
                              std::type_identity_t<const T*> lse, std::type_identity_t<heads_view<const T>> dO,
                              std::type_identity_t<heads_view<T>> dQ, std::type_identity_t<heads_view<T>> dK,
                              std::type_identity_t<heads_view<T>> dV, const options& o = {}) {
  return detail::attention_backward<T>(a, O, lse, dO, dQ, dK, dV, nullptr, o);
}

/// The same, and the gradient of the bias: dBias (the bias's extents [B or 1, H or 1, Tq, Tk], any
/// strides) = dS, summed over the batches and heads that share a broadcast bias, in (b, h) order
/// whatever the threads and the budget (bitwise the same results at every budget and thread
/// count). Every entry is written; masked ones (a −inf bias entry too) get 0. argument_error when
/// the scores have no bias; shape_error when dBias's extents are not the bias's.
template <class T>
eval_stats attention_backward(const detail::attention_expr<T>& a, std::type_identity_t<heads_view<const T>> O,
                              std::type_identity_t<const T*> lse, std::type_identity_t<heads_view<const T>> dO,
                              std::type_identity_t<heads_view<T>> dQ, std::type_identity_t<heads_view<T>> dK,
                              std::type_identity_t<heads_view<T>> dV, std::type_identity_t<heads_view<T>> dBias,
                              const options& o = {}) {
  return detail::attention_backward<T>(a, O, lse, dO, dQ, dK, dV, &dBias, o);
}

/// The least budgets attention's passes fit in (each pass's smallest plan: one worker, one query
/// row against a block of 64 keys), what their budget_errors name: for checking a budget against
/// every pass before any work. 0 for a pass with nothing to compute (no query row meets a key):
/// it then runs at any budget.
struct attention_minimums {
  std::size_t forward = 0;   ///< eval_into
  std::size_t backward = 0;  ///< attention_backward, with or without dBias
};
template <real T>
attention_minimums attention_minimum_bytes(const detail::attention_expr<T>& a) {
  namespace at = detail::attn;
  return {at::plan_forward(a, unlimited, 1).min_bytes, at::plan_backward(a, false, unlimited, 1).p.min_bytes};
}

/// A human-readable account of an attention evaluation, nothing allocated or computed: the
/// expression, the kernels, and the plans of the forward and of the backward (and, for a bias
/// broadcast over B or H, of the backward with its gradient, whose work items are the bias's
/// slices) — or, for a budget too small, that it does not fit and the minimum that would.
template <real T>
std::string explain(const detail::attention_expr<T>& a, const options& o = {}) {
  namespace at = detail::attn;
  const std::size_t budget = detail::resolve_budget(o.budget), threads = plan::resolve_threads(o.threads);
  using detail::cat, detail::msg;
  std::string s = cat(msg{"as written:   ", a.str(), "\n"});
  s += cat(msg{"kernels:      ", host::isa_name(at::kernel::choose().i), " (the products and the element-wise steps)\n"});
  const auto line = [&](const at::attn_plan& p, const char* what) {
    if (p.threads == 0) return std::string("nothing to compute (no query row meets a key): constant outputs, no temporaries\n");
    return cat(msg{what, "; ", p.threads, p.threads == 1 ? " worker" : " workers", ", blocks of ", p.Br,
                   " query rows\n              temporaries ", format_bytes(p.bytes), " planned (",
                   format_bytes(p.per_thread_bytes), " per worker), budget ", format_bytes(budget), ", minimum ",
                   format_bytes(p.min_bytes), "\n"});
  };
  const auto add = [&](const char* label, auto&& plan_it) {
    s += label;
    try {
      s += plan_it();
    } catch (const budget_error& e) {
      s += cat(msg{"does not fit: ", e.what(), "\n"});
    }
  };
  add("forward:      ", [&] { return line(at::plan_forward(a, budget, threads), at::forward_schedule); });
  add("backward:     ", [&] {
    const at::bwd_plan b = at::plan_backward(a, false, budget, threads);
    return line(b.p, b.schedule());
  });
  if (a.s.has_bias && (a.s.bias.batch() * a.s.bias.heads() < a.batch() * a.heads()))
    add("with dBias:   ", [&] {
      const at::bwd_plan b = at::plan_backward(a, true, budget, threads);
      return cat(msg{line(b.p, b.schedule()), "              (", b.S, " bias slices of ", b.G,
                     " heads each, a slice's heads in order)\n"});
    });
  return s;
}

}  // namespace memsafe
