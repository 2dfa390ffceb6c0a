// The cost of including the library and using nothing.
#include <memsafe/memsafe.hpp>
int main() { return memsafe::parse_bytes("1MiB") == 1048576 ? 0 : 1; }
