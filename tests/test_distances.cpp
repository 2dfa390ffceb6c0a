// Every distance × every reduction, float and double, against the dense reference.
#include "sweep.hpp"

using namespace ref;

TEST_SUITE("reference") {
TEST_CASE_TEMPLATE("sqdist against the dense reference", T, float, double) {
  sweep<T>("sqdist", [](auto X, auto Y) { return memsafe::sqdist(X, Y); },
           [](const double* a, const double* b, std::size_t d) { return sq(a, b, d); });
}
TEST_CASE_TEMPLATE("sqdist on integer data matches indices exactly", T, float, double) {
  sweep<T>("sqdist-int", [](auto X, auto Y) { return memsafe::sqdist(X, Y); },
           [](const double* a, const double* b, std::size_t d) { return sq(a, b, d); }, true);
}
TEST_CASE_TEMPLATE("dist against the dense reference", T, float, double) {
  sweep<T>("dist", [](auto X, auto Y) { return memsafe::dist(X, Y); },
           [](const double* a, const double* b, std::size_t d) { return std::sqrt(sq(a, b, d)); });
}
TEST_CASE_TEMPLATE("l1 against the dense reference", T, float, double) {
  sweep<T>("l1", [](auto X, auto Y) { return memsafe::l1(X, Y); },
           [](const double* a, const double* b, std::size_t d) { return l1(a, b, d); });
}
TEST_CASE_TEMPLATE("l1 on integer data matches indices exactly", T, float, double) {
  sweep<T>("l1-int", [](auto X, auto Y) { return memsafe::l1(X, Y); },
           [](const double* a, const double* b, std::size_t d) { return l1(a, b, d); }, true);
}
TEST_CASE_TEMPLATE("cosine against the dense reference", T, float, double) {
  sweep<T>("cosine", [](auto X, auto Y) { return memsafe::cosine(X, Y); },
           [](const double* a, const double* b, std::size_t d) { return cosd(a, b, d); });
}
TEST_CASE_TEMPLATE("dot against the dense reference", T, float, double) {
  sweep<T>("dot", [](auto X, auto Y) { return memsafe::dot(X, Y); },
           [](const double* a, const double* b, std::size_t d) { return dotp(a, b, d); });
}
TEST_CASE_TEMPLATE("dot on integer data matches indices exactly", T, float, double) {
  sweep<T>("dot-int", [](auto X, auto Y) { return memsafe::dot(X, Y); },
           [](const double* a, const double* b, std::size_t d) { return dotp(a, b, d); }, true);
}
}
