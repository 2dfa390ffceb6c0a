// EXPECT: static assertion failed: memsafe: softmax_sum\(scores, V\) of heads: V must have the scores' value type
// Attention over float scores with double values.
#include <memsafe/attention.hpp>

int main() {
  float q[8] = {}, k[8] = {};
  double v[8] = {};
  auto Q = memsafe::heads(q, 1, 1, 4, 2);
  auto K = memsafe::heads(k, 1, 1, 4, 2);
  auto V = memsafe::heads(v, 1, 1, 4, 2);
  auto A = memsafe::softmax_sum(memsafe::dot(Q, K), V);
  (void)A;
}
