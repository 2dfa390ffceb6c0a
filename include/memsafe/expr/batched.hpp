// memsafe/expr/batched.hpp — reductions of a batch of lazy matrices (broadcast tensors with
// leading batch axes). The result is batch-major: entry (b, i, c) at ((b·n + i)·cols + c).
#pragma once
#include <cstddef>
#include <string>

#include "../core/error.hpp"
#include "reductions.hpp"
#include "tensor.hpp"

namespace memsafe {

namespace detail {
template <class R, class S>
struct batched_reduce_expr : evaluable_tag {
  using value_type = typename S::value_type;
  using one_type = reduce_expr<R, decltype(slice(std::declval<const S&>(), 0))>;
  static constexpr bool has_indices = one_type::has_indices;
  S s;
  R r;
  one_type slice_expr(std::size_t b) const { return {{}, slice(s, b), r}; }
  std::size_t rows() const { return checked_mul(s.batch(), slice(s, 0).rows(), "memsafe: a batch's rows"); }
  std::size_t cols() const {
    if constexpr (requires { r.k; }) return r.k;
    else return 1;
  }
  MEMSAFE_COLD std::string str() const {
    if constexpr (requires { r.k; }) return cat(msg{R::name, "(", s.str(), ", k=", r.k, ")"});
    else return cat(msg{R::name, "(", s.str(), ")"});
  }
};

template <class S>
concept batch = is_batched<S>::value;
template <class R, class S>
auto make_batched(const S& s, R r = {}) {
  if (s.batch() > 0) {
    const auto one = slice(s, 0);
    if constexpr (requires { r.k; }) check_k(one, r.k, R::name);
    else if constexpr (std::is_same_v<R, red::argmin> || std::is_same_v<R, red::argmax>) check_nonempty(one, R::name);
  }
  return batched_reduce_expr<R, S>{{}, s, r};
}
}  // namespace detail

template <detail::batch S>
auto sum(const S& s) { return detail::make_batched<red::sum>(s); }
template <detail::batch S>
auto min(const S& s) { return detail::make_batched<red::min>(s); }
template <detail::batch S>
auto max(const S& s) { return detail::make_batched<red::max>(s); }
template <detail::batch S>
auto argmin(const S& s) { return detail::make_batched<red::argmin>(s); }
template <detail::batch S>
auto argmax(const S& s) { return detail::make_batched<red::argmax>(s); }
template <detail::batch S>
auto logsumexp(const S& s) { return detail::make_batched<red::logsumexp>(s); }
template <detail::batch S>
auto argkmin(const S& s, std::size_t k) { return detail::make_batched(s, red::argkmin{k}); }
template <detail::batch S>
auto argkmax(const S& s, std::size_t k) { return detail::make_batched(s, red::argkmax{k}); }

}  // namespace memsafe
