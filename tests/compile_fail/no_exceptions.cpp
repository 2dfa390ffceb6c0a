// EXPECT: memsafe reports every error as a C[+][+] exception: it cannot be compiled with -fno-exceptions
// FLAGS: -fno-exceptions
// Every memsafe error is an exception; without them the first throw in a header stopped the build
// with the compiler's own "exception handling disabled" (or, with clang, one error per throw).
#include <memsafe/memsafe.hpp>

int main() { return memsafe::parse_bytes("1MiB") == 1048576 ? 0 : 1; }
