// memsafe::precompiled: the explicit instantiation definitions of host::run for one formula and
// one value type (see include/memsafe/api/precompiled.hpp). CMake compiles this file once per
// (formula, value type), defining MEMSAFE_PRECOMPILED_FORMULA and MEMSAFE_PRECOMPILED_VALUE.
#if !defined(MEMSAFE_PRECOMPILED_BUILD) || !defined(MEMSAFE_PRECOMPILED_FORMULA) || !defined(MEMSAFE_PRECOMPILED_VALUE)
#error "src/precompiled.cpp is compiled by the memsafe::precompiled target (MEMSAFE_PRECOMPILED_BUILD, _FORMULA, _VALUE)"
#endif
#include <memsafe/memsafe.hpp>

MEMSAFE_PRECOMPILED_FOR_EACH_EXPR(::memsafe::formula::MEMSAFE_PRECOMPILED_FORMULA, MEMSAFE_PRECOMPILED_VALUE,
                                  MEMSAFE_PRECOMPILED_RUN_)
