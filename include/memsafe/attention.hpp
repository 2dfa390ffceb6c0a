// memsafe/attention.hpp — the opt-in entry header of attention: the core (memsafe.hpp) plus
// batched, multi-head attention written the naive way, softmax_sum(scale * dot(Q, K) + masks, V)
// over [B, H, T, d] views, evaluated as the online-softmax reduction under the budget (forward:
// memsafe::eval_into; backward: memsafe::attention_backward), on the host (docs/design.md,
// "Attention").
#pragma once

#include "memsafe.hpp"

#include "api/attention.hpp"
#include "backend/host/attention.hpp"
#include "expr/attention.hpp"
