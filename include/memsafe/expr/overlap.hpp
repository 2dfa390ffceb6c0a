// memsafe/expr/overlap.hpp — whether an evaluation's outputs share memory with its inputs.
//
// Every evaluation writes its outputs while it still reads its inputs (tile after tile), so an
// output that shares a byte with an input gives a wrong answer, silently: `v = K·v` in place, a
// distance matrix written over its own points. eval_into (plan/options.hpp: check_outputs), the
// attention forward and backward refuse it with an argument_error before any work.
//
// The test is exact, not by bounding ranges: a strided block is the set of its elements, so
// interleaved but disjoint layouts pass (Q, K and V packed in one [B, T, 3, H, d] buffer, their
// gradients into another; an output placed between the rows of a strided input). Blocks are
// split along their largest stride, and only the slices whose byte range meets the other block's
// are visited (found by division), so the test costs a few operations per contiguous run of the
// block it splits — nothing next to the evaluation — and O(1) when the ranges are disjoint.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "view.hpp"

namespace memsafe::detail {

/// A strided block of memory: rank axes of ext[k] elements, byte strides st[k], elements of sz
/// bytes from base. Axes of extent 1 and of stride 0 (broadcast) are dropped, the rest sorted by
/// stride, largest first; empty: no element. A block with more than max_axes such axes (a tensor
/// of rank 9 or more, every axis strided) is kept as the whole byte range it spans, one axis of
/// bytes: an overlap is never missed, and a disjoint interleaving of it may be refused.
struct mem_block {
  static constexpr std::size_t max_axes = 8;
  std::uintptr_t base = 0;
  std::size_t sz = 0, rank = 0;
  std::size_t ext[max_axes] = {}, st[max_axes] = {};
  bool empty = true;  ///< no element (a default block: an absent input or output)
  bool broadcast = false;  ///< an axis of more than one element has stride 0 (dropped from the axes)

  mem_block() = default;
  mem_block(const void* p, std::size_t elem, std::size_t r, const std::size_t* e, const std::size_t* s)
      : base(reinterpret_cast<std::uintptr_t>(p)), sz(elem), empty(false) {
    std::size_t axes = 0, bytes = elem;  // (the views' constructors checked that the span is addressable)
    for (std::size_t k = 0; k < r; ++k) {
      if (e[k] > 1 && s[k] != 0) ++axes, bytes += (e[k] - 1) * s[k] * elem;
      broadcast = broadcast || (e[k] > 1 && s[k] == 0);
    }
    if (axes > max_axes) {
      for (std::size_t k = 0; k < r; ++k) empty = empty || e[k] == 0;
      sz = 1, rank = 1, ext[0] = bytes, st[0] = 1;
      empty = empty || !p || elem == 0;
      return;
    }
    for (std::size_t k = 0; k < r; ++k) {
      if (e[k] == 0) empty = true;
      if (e[k] <= 1 || s[k] == 0) continue;
      std::size_t j = rank++;  // insertion by stride, largest first
      for (; j > 0 && st[j - 1] < s[k] * elem; --j) {
        ext[j] = ext[j - 1];
        st[j] = st[j - 1];
      }
      ext[j] = e[k];
      st[j] = s[k] * elem;
    }
    empty = empty || !p || elem == 0;
  }
  /// Bytes from the first element's first byte to the last element's last byte.
  std::size_t span() const {
    std::size_t b = sz;
    for (std::size_t k = 0; k < rank; ++k) b += (ext[k] - 1) * st[k];
    return b;
  }
  /// Whether the elements fill [base, base + span()) with no gap.
  bool dense() const {
    std::size_t want = sz;
    for (std::size_t k = rank; k-- > 0;) {
      if (st[k] != want) return false;
      want *= ext[k];
    }
    return true;
  }
  /// Slice i along the first (largest-stride) axis.
  mem_block slice(std::size_t i) const {
    mem_block b = *this;
    b.base = base + i * st[0];
    for (std::size_t k = 1; k < rank; ++k) {
      b.ext[k - 1] = ext[k];
      b.st[k - 1] = st[k];
    }
    --b.rank;
    return b;
  }
  /// The slices along the first axis whose byte range meets [lo, hi): [first, last], empty when
  /// first > last.
  void slices_meeting(std::uintptr_t lo, std::uintptr_t hi, std::size_t& first, std::size_t& last) const {
    const std::size_t sub = span() - (ext[0] - 1) * st[0];  // one slice's bytes
    first = lo >= base + sub ? (lo - base - sub) / st[0] + 1 : 0;
    if (hi <= base) {
      first = 1, last = 0;
      return;
    }
    last = (hi - 1 - base) / st[0];
    if (last > ext[0] - 1) last = ext[0] - 1;
  }
};

/// Whether an element of b has a byte in [lo, hi).
inline bool block_meets(const mem_block& b, std::uintptr_t lo, std::uintptr_t hi) {
  if (b.empty || lo >= hi || b.base >= hi || b.base + b.span() <= lo) return false;
  if (b.rank == 0 || b.dense()) return true;
  std::size_t first, last;
  b.slices_meeting(lo, hi, first, last);
  for (std::size_t i = first; i <= last; ++i)
    if (block_meets(b.slice(i), lo, hi)) return true;
  return false;
}

/// Whether a and b share a byte.
inline bool blocks_overlap(const mem_block& a, const mem_block& b) {
  if (a.empty || b.empty) return false;
  const std::uintptr_t alo = a.base, ahi = a.base + a.span(), blo = b.base, bhi = b.base + b.span();
  if (ahi <= blo || bhi <= alo) return false;
  if (a.rank == 0 || a.dense()) return block_meets(b, alo, ahi);
  if (b.rank == 0 || b.dense()) return block_meets(a, blo, bhi);
  // split the block whose slices are larger: fewer pieces to visit
  const bool split_a = a.st[0] >= b.st[0];
  const mem_block& s = split_a ? a : b;
  const mem_block& o = split_a ? b : a;
  std::size_t first, last;
  s.slices_meeting(o.base, o.base + o.span(), first, last);
  for (std::size_t i = first; i <= last; ++i)
    if (blocks_overlap(s.slice(i), o)) return true;
  return false;
}

/// Whether two different elements of b share a byte: a broadcast axis, or strides that fold the
/// block onto itself. An output written through such a view would have one element written by
/// several workers (a race) and hold only one of the values. Exact, as blocks_overlap: the slices
/// along the largest stride are translates of slice 0, so only slice 0 against the slices that
/// start within its span (k·stride < its span) need a test, and slice 0 itself, recursively. A
/// block whose slices interleave more finely than max_interleave counts as overlapping (no layout
/// a program writes through; the message says so). A block of more than max_axes strided axes (kept
/// as its byte range) is taken as given.
inline bool block_self_overlaps(const mem_block& b) {
  constexpr std::size_t max_interleave = 1024;
  if (b.empty) return false;
  if (b.broadcast) return true;
  if (b.rank <= 1) return false;
  const mem_block s0 = b.slice(0);
  if (block_self_overlaps(s0)) return true;
  const std::size_t sub = s0.span();
  for (std::size_t k = 1; k < b.ext[0] && k * b.st[0] < sub; ++k) {
    if (k > max_interleave) return true;
    if (blocks_overlap(s0, b.slice(k))) return true;
  }
  return false;
}

/// The block of a matrix or vector view.
template <class T, std::size_t R, std::size_t C>
mem_block block_of(const matrix_view<T, R, C>& m) {
  const std::size_t e[2] = {m.rows(), m.cols()}, s[2] = {m.row_stride(), m.col_stride()};
  return {m.data(), sizeof(T), 2, e, s};
}
template <class T, std::size_t N>
mem_block block_of(const vector_view<T, N>& v) {
  const std::size_t e[1] = {v.size()}, s[1] = {v.stride()};
  return {v.data(), sizeof(T), 1, e, s};
}
/// The block of count contiguous elements.
template <class T>
mem_block contiguous_block(const T* p, std::size_t count) {
  const std::size_t e[1] = {count}, s[1] = {1};
  return {p, sizeof(T), 1, e, s};
}

/// f(mem_block) for every piece of caller memory expression node n reads: the views of its
/// leaves (pairwise points and per-dimension parameters, dense factors, diagonals, the right-hand
/// sides of products, softmax values, tensor leaves), found through the nodes' members.
template <class N, class F>
void for_each_input(const N& n, F&& f) {
  using V = std::remove_cvref_t<N>;
  if constexpr (is_matrix_view<V>::value || is_vector_view<V>::value) {
    f(block_of(n));
  } else if constexpr (requires { n.x.data(); n.y.data(); n.params.per_dim; }) {  // pairwise
    f(block_of(n.x));
    f(block_of(n.y));
    if (n.params.per_dim) f(contiguous_block(n.params.per_dim, n.x.cols()));
  } else if constexpr (requires { n.data; n.src_shape; n.src_strides; }) {  // a tensor leaf
    f(mem_block(n.data, sizeof(*n.data), n.src_shape.size(), n.src_shape.data(), n.src_strides.data()));
  } else if constexpr (requires { n.f; std::tuple_size<decltype(n.f)>::value; }) {  // a chain
    std::apply([&](const auto&... g) { (for_each_input(g, f), ...); }, n.f);
  } else if constexpr (std::is_class_v<V>) {
    if constexpr (requires { n.e; }) for_each_input(n.e, f);
    if constexpr (requires { n.a; n.b; }) {
      for_each_input(n.a, f);
      for_each_input(n.b, f);
    }
    if constexpr (requires { n.rhs.data(); }) f(block_of(n.rhs));
    if constexpr (requires { n.values.data(); }) f(block_of(n.values));
    if constexpr (requires { n.m.data(); }) f(block_of(n.m));   // a dense factor
    if constexpr (requires { n.d; }) for_each_input(n.d, f);  // a diagonal (a vector_diagonal holds a view)
    if constexpr (requires { n.s.batch(); }) for_each_input(n.s, f);  // a batch
    if constexpr (requires { n.x.rows(); } && !requires { n.y; }) for_each_input(n.x, f);  // pinned
  }
}

/// A block with the name messages give it.
struct named_block {
  const char* name;
  mem_block b;
};
/// argument_error when an output shares memory with an input or with another output, or its own
/// elements share memory (a broadcast axis, folded strides) (each evaluation that writes several
/// outputs: attention's forward and backward, the GP predictions).
/// Messages start with prefix + where ("memsafe: eval_into(attention)", "memsafe::gp::predict").
template <std::size_t NO, std::size_t NI>
void check_apart(const named_block (&outs)[NO], const named_block (&ins)[NI], const char* where,
                 const char* prefix = "memsafe: ") {
  for (std::size_t o = 0; o < NO; ++o) {
    if (block_self_overlaps(outs[o].b))
      throw argument_error(cat(msg{prefix, where, ": the output ", outs[o].name,
                                "'s elements share memory with one another (a stride of 0, or strides that fold it onto "
                                "itself or interleave it too finely to check): each element must have its own memory"}));
    for (std::size_t i = 0; i < NI; ++i)
      if (blocks_overlap(outs[o].b, ins[i].b))
        throw argument_error(cat(msg{prefix, where, ": the output ", outs[o].name, " shares memory with the input ",
                                  ins[i].name,
                                  ": outputs are written while the inputs are still being read; use separate buffers"}));
    for (std::size_t p = 0; p < o; ++p)
      if (blocks_overlap(outs[o].b, outs[p].b))
        throw argument_error(cat(msg{prefix, where, ": the outputs ", outs[p].name, " and ", outs[o].name, " share memory"}));
  }
}

/// Throws argument_error when output block `out` (named `what`) shares memory with an input of x.
template <class X>
void check_no_overlap(const X& x, const mem_block& out, const char* what, const char* where) {
  for_each_input(x, [&](const mem_block& in) {
    if (blocks_overlap(out, in))
      throw argument_error(cat(msg{where, ": the ", what, " output shares memory with an input of ", x.str(),
                                ": outputs are written while the inputs are still being read; evaluate into a "
                                "separate buffer"}));
  });
}

}  // namespace memsafe::detail
