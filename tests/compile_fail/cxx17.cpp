// EXPECT: memsafe needs C[+][+]20: compile with -std=c[+][+]20
// FLAGS: -std=c++17
// memsafe is C++20; under C++17 the first concept stopped the build with "'concept' does not name a
// type" deep in a header.
#include <memsafe/memsafe.hpp>

int main() { return memsafe::parse_bytes("1MiB") == 1048576 ? 0 : 1; }
