// memsafe/memsafe.hpp — the one header to include.
//
//   capture (expr/) → rewrite (rewrite/) → plan (plan/) → execute (exec/, backend/host/)
#pragma once

#include "core/accounting.hpp"
#include "core/budget.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/math.hpp"
#include "exec/eval.hpp"
#include "expr/formulas.hpp"
#include "expr/lazy.hpp"
#include "expr/reductions.hpp"
#include "expr/view.hpp"
#include "plan/plan.hpp"
#include "rewrite/normalize.hpp"
