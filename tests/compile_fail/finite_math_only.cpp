// EXPECT: memsafe cannot be compiled with -ffast-math, -Ofast, -fassociative-math or -ffinite-math-only
// FLAGS: -ffinite-math-only -DMEMSAFE_HAS_LAPACK=1
// -ffinite-math-only folds away memsafe's NaN and infinity checks (NaN inputs, overflowing squares);
// the GP module's header stops too.
#include <memsafe/gp.hpp>

int main() { return 0; }
