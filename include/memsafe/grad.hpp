// memsafe/grad.hpp — the opt-in entry header of gradients: the core (memsafe.hpp) plus
// vector–Jacobian products of reductions under the budget, on the host backend
// (memsafe::vjp, memsafe::wrt, memsafe::grad, plan_for/explain of a vjp; docs/design.md, "Gradients").
#pragma once

#include "memsafe.hpp"

#include "api/grad.hpp"
#include "expr/derivatives.hpp"
#include "expr/grad.hpp"
#include "lower/grad.hpp"
#include "plan/grad.hpp"
