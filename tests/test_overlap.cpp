// Outputs that share memory with inputs (expr/overlap.hpp): eval_into and attention refuse them
// before any work; interleaved but disjoint layouts pass. The overlap test itself is checked
// against an enumeration of every element's bytes.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <memsafe/attention.hpp>
#include <memsafe/memsafe.hpp>

#include "reference.hpp"

namespace {

using memsafe::detail::mem_block;

/// The set of bytes (offsets from base 0) of a block given by extents and element strides.
std::vector<bool> bytes_of(std::size_t base, std::size_t elem, const std::vector<std::size_t>& e,
                           const std::vector<std::size_t>& s, std::size_t space) {
  std::vector<bool> hit(space, false);
  std::size_t count = 1;
  for (auto x : e) count *= x;
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t rem = i, off = 0;
    for (std::size_t k = e.size(); k-- > 0;) {
      off += (rem % e[k]) * s[k];
      rem /= e[k];
    }
    for (std::size_t b = 0; b < elem; ++b) hit[base + off * elem + b] = true;
  }
  return hit;
}

/// Two strided blocks at offsets base[t] from a fake, aligned origin (no memory is touched): their
/// mem_blocks, and whether they share a byte by enumerating every element's bytes.
struct block_pair {
  mem_block a, b;
  bool share;
};
block_pair blocks_at(const std::size_t (&base)[2], std::size_t elem, const std::vector<std::size_t> (&e)[2],
                     const std::vector<std::size_t> (&s)[2], std::size_t space) {
  const std::uintptr_t origin = 1 << 20;
  const auto x = bytes_of(base[0], elem, e[0], s[0], space), y = bytes_of(base[1], elem, e[1], s[1], space);
  bool share = false;
  for (std::size_t i = 0; i < space && !share; ++i) share = x[i] && y[i];
  return {mem_block(reinterpret_cast<const void*>(origin + base[0]), elem, e[0].size(), e[0].data(), s[0].data()),
          mem_block(reinterpret_cast<const void*>(origin + base[1]), elem, e[1].size(), e[1].data(), s[1].data()), share};
}

}  // namespace

TEST_CASE("overlap: the exact test agrees with an enumeration of the bytes of random strided blocks") {
  std::mt19937 g(7);
  std::uniform_int_distribution<std::size_t> R(1, 4), E(0, 5), S(0, 9), B(0, 200), Z(1, 8);
  int overlaps = 0, disjoint = 0, dense_pairs = 0, interleaved = 0;
  for (int trial = 0; trial < 10000; ++trial) {
    const std::size_t elem = Z(g) <= 4 ? 4 : 8;
    std::vector<std::size_t> e[2], s[2];
    std::size_t base[2];
    for (int t = 0; t < 2; ++t) {
      const std::size_t r = R(g);
      e[t].resize(r);
      s[t].resize(r);
      for (std::size_t k = 0; k < r; ++k) e[t][k] = E(g), s[t][k] = S(g);
      if (trial % 5 == 0) {  // every fifth: dense row-major
        std::size_t st = 1;
        for (std::size_t k = r; k-- > 0;) s[t][k] = st, st *= (e[t][k] ? e[t][k] : 1);
        ++dense_pairs;
      }
      base[t] = B(g) * (trial % 3 == 0 ? 1 : elem);  // sometimes misaligned by a byte count
    }
    const auto [A, Bk, want] = blocks_at(base, elem, e, s, 200 * 8 + 6 * 6 * 10 * 10 * 8 + 64);
    CAPTURE(trial);
    CHECK(memsafe::detail::blocks_overlap(A, Bk) == want);
    CHECK(memsafe::detail::blocks_overlap(Bk, A) == want);
    (want ? overlaps : disjoint)++;
    // byte ranges that meet with no common element: what a test by ranges gets wrong
    if (!want && !A.empty && !Bk.empty && A.base < Bk.base + Bk.span() && Bk.base < A.base + A.span()) ++interleaved;
  }
  CHECK(overlaps > 800);  // both answers are exercised
  CHECK(disjoint > 800);
  CHECK(interleaved > 150);
  CHECK(dense_pairs > 0);
}

TEST_CASE("overlap: whether a block overlaps itself agrees with an enumeration of its elements") {
  // An output whose own elements share bytes (a broadcast axis, folded or interleaved strides) is
  // refused by check_apart; a disjoint interleaving (extent 2 stride 3 over extent 3 stride 2) passes.
  std::mt19937 g(13);
  std::uniform_int_distribution<std::size_t> R(1, 4), E(0, 5), S(0, 9), Z(1, 8);
  int folded = 0, injective = 0, interleaved = 0;
  for (int trial = 0; trial < 10000; ++trial) {
    const std::size_t elem = Z(g) <= 4 ? 4 : 8, r = R(g);
    std::vector<std::size_t> e(r), s(r);
    for (std::size_t k = 0; k < r; ++k) e[k] = E(g), s[k] = S(g);
    std::size_t count = 1, space = elem;
    for (std::size_t k = 0; k < r; ++k) count *= e[k], space += (e[k] ? e[k] - 1 : 0) * s[k] * elem;
    std::vector<int> hits(space, 0);
    bool want = false;
    for (std::size_t i = 0; i < count; ++i) {
      std::size_t rem = i, off = 0;
      for (std::size_t k = r; k-- > 0;) {
        off += (rem % e[k]) * s[k];
        rem /= e[k];
      }
      for (std::size_t b = 0; b < elem; ++b) want = hits[off * elem + b]++ > 0 || want;
    }
    const mem_block blk(reinterpret_cast<const void*>(std::uintptr_t{1} << 20), elem, r, e.data(), s.data());
    CAPTURE(trial);
    CHECK(memsafe::detail::block_self_overlaps(blk) == want);
    (want ? folded : injective)++;
    if (!want && blk.rank >= 2 && blk.st[0] < blk.slice(0).span()) ++interleaved;
  }
  CHECK(folded > 1000);
  CHECK(injective > 1000);
  CHECK(interleaved > 50);
  const std::size_t e[2] = {2, 3}, s[2] = {3, 2};
  CHECK_FALSE(memsafe::detail::block_self_overlaps(mem_block(reinterpret_cast<const void*>(std::uintptr_t{64}), 1, 2, e, s)));
}

TEST_CASE("overlap: blocks of 9 and 10 axes - exact up to 8 strided axes, never missing an overlap beyond") {
  // Axes of extent 1 or stride 0 do not count: up to 8 others the test is exact; with more, a block
  // is taken as the byte range it spans (an interleaving may be refused, an overlap never missed).
  std::mt19937 g(11);
  std::uniform_int_distribution<std::size_t> R(9, 10), E(1, 6), S(0, 9), B(0, 200), Z(1, 8);
  int exact = 0, coarse = 0, overlaps = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t elem = Z(g) <= 4 ? 4 : 8;
    std::vector<std::size_t> e[2], s[2];
    std::size_t base[2], axes[2] = {0, 0};
    for (int t = 0; t < 2; ++t) {
      const std::size_t r = R(g);
      e[t].resize(r);
      s[t].resize(r);
      for (std::size_t k = 0; k < r; ++k) {
        e[t][k] = E(g) == 1 ? 1 : 2, s[t][k] = S(g);  // extent 2 five times in six
        axes[t] += e[t][k] > 1 && s[t][k] != 0;
      }
      base[t] = B(g) * elem;
    }
    const auto [A, Bk, want] = blocks_at(base, elem, e, s, 200 * 8 + 10 * 9 * 8 + 64);
    CAPTURE(trial);
    const bool got = memsafe::detail::blocks_overlap(A, Bk);
    CHECK(got == memsafe::detail::blocks_overlap(Bk, A));
    if (want) CHECK(got);  // never missed
    if (axes[0] <= mem_block::max_axes && axes[1] <= mem_block::max_axes) {
      CHECK(got == want);
      ++exact;
    } else {
      ++coarse;
    }
    overlaps += want;
  }
  CHECK(exact > 300);
  CHECK(coarse > 300);
  CHECK(overlaps > 300);
  // A rank-9 tensor (six axes of extent 1) and a rank-10 one with nine strided axes, as an
  // evaluation's input: an output over them is refused (before, tensors of more than 8 axes were
  // not checked at all, and the sums below were written over the points they read).
  std::vector<double> x(2 * 20 * 3, 1.0), y(256 * 4 * 3, 0.5), out(256 * 4);
  const memsafe::options o{.budget = 1 << 16};
  const std::size_t d9[9] = {1, 1, 1, 1, 1, 1, 2, 20, 3};
  const auto T9 = memsafe::tensor(x.data(), d9);
  const auto D9 = memsafe::sum<9>(memsafe::square(memsafe::unsqueeze<8>(T9) - memsafe::unsqueeze<7>(T9)));
  CHECK_THROWS_AS(memsafe::eval_into(memsafe::sum(D9), x.data() + 5, nullptr, o), memsafe::argument_error);
  CHECK_NOTHROW(memsafe::eval_into(memsafe::sum(D9), out.data(), nullptr, o));
  const std::size_t d10[10] = {2, 2, 2, 2, 2, 2, 2, 2, 4, 3};  // 2^8 batches of 4 points in 3-D
  const auto T10 = memsafe::tensor(y.data(), d10);
  const auto D10 = memsafe::sum<10>(memsafe::square(memsafe::unsqueeze<9>(T10) - memsafe::unsqueeze<8>(T10)));
  CHECK_THROWS_AS(memsafe::eval_into(memsafe::sum(D10), y.data() + 100, nullptr, o), memsafe::argument_error);
  CHECK_NOTHROW(memsafe::eval_into(memsafe::sum(D10), out.data(), nullptr, o));
}

TEST_CASE("overlap: eval_into refuses an output that is one of its inputs") {
  const std::size_t n = 40, d = 3;
  auto x = ref::data(n, d, 1);
  std::vector<double> v(n, 0.5), out(n);
  const auto X = memsafe::points(x.data(), n, d);
  const auto K = memsafe::rbf(X, X, 1.0, 1.0);
  const memsafe::options o{.budget = 1 << 12};
  // v = K·v in place: the tiles would read v after earlier rows were written
  const std::string m =
      ref::message_of<memsafe::argument_error>([&] { (void)memsafe::eval_into(K * memsafe::vec(v.data(), n), v.data(), nullptr, o); });
  CHECK(ref::contains(m, "shares memory with an input"));
  CHECK(ref::contains(m, "separate buffer"));
  // the distances written over the points themselves; the indices of a top-k over them
  CHECK_THROWS_AS(memsafe::eval_into(memsafe::sum(memsafe::sqdist(X, X)), x.data() + 5, nullptr, o), memsafe::argument_error);
  std::vector<memsafe::index_t> idx(n * 2);
  const auto xi = reinterpret_cast<memsafe::index_t*>(x.data());
  CHECK(ref::contains(ref::message_of<memsafe::argument_error>([&] {
                        (void)memsafe::eval_into(memsafe::argkmin(memsafe::sqdist(X, X), 2), out.data(), xi, o);
                      }),
                      "indices"));
  // the values and the indices in one buffer: refused where they meet, evaluated side by side
  std::vector<double> both(n * 2 * 2 + 1);
  const auto at = [&](std::size_t off) { return reinterpret_cast<memsafe::index_t*>(both.data() + off); };
  const auto top2 = memsafe::argkmin(memsafe::sqdist(X, X), 2);
  CHECK(ref::contains(ref::message_of<memsafe::argument_error>([&] {
                        (void)memsafe::eval_into(top2, both.data(), at(n * 2 - 1), o);
                      }),
                      "values and indices outputs share memory"));
  CHECK_THROWS_AS(memsafe::eval_into(top2, both.data() + 1, at(0), o), memsafe::argument_error);
  REQUIRE_NOTHROW(memsafe::eval_into(top2, both.data(), at(n * 2), o));
  const auto apart = memsafe::eval(top2, o);
  CHECK(std::vector<memsafe::index_t>(at(n * 2), at(n * 2) + n * 2) == apart.indices);
  CHECK(std::vector<double>(both.data(), both.data() + n * 2) == apart.values);
  // ARD lengthscales, a diagonal term, the right-hand side of K·M and the values of softmax_sum
  std::vector<double> ls(d + n, 1.5);
  const auto Ka = memsafe::rbf(X, X, memsafe::ard(ls.data(), d), 1.0);
  CHECK_THROWS_AS(memsafe::eval_into(memsafe::sum(Ka), ls.data() + 2, nullptr, o), memsafe::argument_error);
  CHECK_NOTHROW(memsafe::eval_into(memsafe::sum(Ka), ls.data() + d, nullptr, o));  // just past them
  std::vector<double> dg(n, 0.1);
  CHECK_THROWS_AS(memsafe::eval_into((K + memsafe::diag(memsafe::vec(dg.data(), n))) * memsafe::vec(v.data(), n),
                                     dg.data(), nullptr, o),
                  memsafe::argument_error);
  std::vector<double> M(n * 2, 0.25);
  CHECK_THROWS_AS(memsafe::eval_into(K * memsafe::matrix(M.data(), n, 2), M.data() + n, nullptr, o), memsafe::argument_error);
  CHECK_THROWS_AS(memsafe::eval_into(memsafe::softmax_sum(K, memsafe::matrix(M.data(), n, 2)), M.data(), nullptr, o),
                  memsafe::argument_error);
  // a product of lazy matrices and a chain
  CHECK_THROWS_AS(memsafe::eval_into(K * (memsafe::transpose(K) * memsafe::vec(v.data(), n)), v.data(), nullptr, o),
                  memsafe::argument_error);
  // a batch of broadcast tensors
  const std::size_t dims[3] = {2, n / 2, d};
  const auto T = memsafe::tensor(x.data(), dims);
  const auto D = memsafe::sum<3>(memsafe::square(memsafe::unsqueeze<2>(T) - memsafe::unsqueeze<1>(T)));
  CHECK_THROWS_AS(memsafe::eval_into(memsafe::sum(D), x.data() + n * d - 1, nullptr, o), memsafe::argument_error);
}

TEST_CASE("overlap: outputs beside or between their inputs are evaluated, and equal the reference") {
  const std::size_t n = 30, d = 2, ld = 2 * d;
  // X's rows interleaved with free slots: row i at [i·ld, i·ld + d), the slots [i·ld + d, (i+1)·ld)
  std::vector<double> buf(n * ld, 0.0);
  auto x = ref::data(n, d, 3);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < d; ++k) buf[i * ld + k] = x[i * d + k];
  const memsafe::matrix_view<const double> X(buf.data(), n, d, ld, 1);
  const auto e = memsafe::sum(memsafe::sqdist(X, X));
  const auto want = memsafe::eval(memsafe::sum(memsafe::sqdist(memsafe::points(x.data(), n, d), memsafe::points(x.data(), n, d))),
                                  memsafe::budget_bytes(1 << 12));
  // the two outputs of the first two rows inside row 0's free slot: within X's byte range, on
  // none of its elements
  const memsafe::matrix_view<const double> X2(buf.data(), 2, d, ld, 1);
  double* slot = buf.data() + d;
  CHECK_NOTHROW(memsafe::eval_into(memsafe::min(memsafe::sqdist(X2, X)), slot, nullptr, memsafe::options{.budget = 1 << 12}));
  const auto pts = memsafe::points(x.data(), n, d);
  const auto want_min = memsafe::eval(memsafe::min(memsafe::sqdist(memsafe::points(x.data(), 2, d), pts)),
                                      memsafe::budget_bytes(1 << 12));
  CHECK(slot[0] == want_min.values[0]);
  CHECK(slot[1] == want_min.values[1]);
  // one more output would reach row 1: refused
  const memsafe::matrix_view<const double> X3(buf.data(), 3, d, ld, 1);
  CHECK_THROWS_AS(memsafe::eval_into(memsafe::min(memsafe::sqdist(X3, X)), slot, nullptr, memsafe::options{.budget = 1 << 12}),
                  memsafe::argument_error);
  // n outputs need n contiguous slots: use a separate buffer right after X's last element
  std::vector<double> after(n);
  CHECK_NOTHROW(memsafe::eval_into(e, after.data(), nullptr, memsafe::options{.budget = 1 << 12}));
  for (std::size_t i = 0; i < n; ++i) CHECK(after[i] == doctest::Approx(want.values[i]).epsilon(1e-12));
}

TEST_CASE("overlap: attention refuses an output over an input, and takes packed QKV with packed gradients") {
  const std::size_t B = 1, H = 2, Tn = 8, dh = 4;
  // packed [B, T, 3, H, dh]: Q, K, V interleaved; their gradients likewise in a second buffer
  std::vector<float> qkv(B * Tn * 3 * H * dh), dqkv(qkv.size(), 0.0f);
  for (std::size_t i = 0; i < qkv.size(); ++i) qkv[i] = 0.01f * float((i * 37) % 101) - 0.5f;
  const std::size_t sb = Tn * 3 * H * dh, st = 3 * H * dh, sh = dh;
  auto packed = [&](float* base, int which) { return memsafe::heads_view<float>(base + which * H * dh, B, H, Tn, dh, sb, sh, st, 1); };
  const auto Q = memsafe::heads_view<const float>(packed(qkv.data(), 0)), K = memsafe::heads_view<const float>(packed(qkv.data(), 1)),
             V = memsafe::heads_view<const float>(packed(qkv.data(), 2));
  const auto A = memsafe::softmax_sum(memsafe::dot(Q, K), V);
  std::vector<float> O(B * H * Tn * dh), lse(B * H * Tn), dO(O.size(), 0.1f);
  const memsafe::options o{.budget = 1 << 16};
  CHECK_NOTHROW(memsafe::eval_into(A, memsafe::heads(O.data(), B, H, Tn, dh), lse.data(), o));
  // O written over V (an element of it), lse over Q
  CHECK(ref::contains(ref::message_of<memsafe::argument_error>(
                          [&] { (void)memsafe::eval_into(A, packed(qkv.data(), 2), lse.data(), o); }),
                      "shares memory"));
  CHECK_THROWS_AS(memsafe::eval_into(A, memsafe::heads(O.data(), B, H, Tn, dh), qkv.data() + 3, o), memsafe::argument_error);
  // the gradients packed like the inputs: disjoint, evaluated
  const auto Oc = memsafe::heads(static_cast<const float*>(O.data()), B, H, Tn, dh);
  const auto dOc = memsafe::heads(static_cast<const float*>(dO.data()), B, H, Tn, dh);
  CHECK_NOTHROW(memsafe::attention_backward(A, Oc, lse.data(), dOc, packed(dqkv.data(), 0), packed(dqkv.data(), 1),
                                            packed(dqkv.data(), 2), o));
  // dK over dQ, and dV over V
  CHECK_THROWS_AS(memsafe::attention_backward(A, Oc, lse.data(), dOc, packed(dqkv.data(), 0), packed(dqkv.data(), 0),
                                              packed(dqkv.data(), 2), o),
                  memsafe::argument_error);
  CHECK_THROWS_AS(memsafe::attention_backward(A, Oc, lse.data(), dOc, packed(dqkv.data(), 0), packed(dqkv.data(), 1),
                                              packed(qkv.data(), 2), o),
                  memsafe::argument_error);
}
