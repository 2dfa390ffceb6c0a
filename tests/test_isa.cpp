// Run-time choice of the instruction set of the host's fused kernels (backend/host/isa.hpp):
// detection, MEMSAFE_ISA parsing and errors, what the plan and explain report. That every
// instruction set gives the portable path's answers is tests/test_select.cpp's job (it forces each
// one this CPU runs); the default-flags build is tests/consumer's.
#include <doctest/doctest.h>

#include <cstdlib>
#include <memsafe/memsafe.hpp>
#include <optional>
#include <string>
#include <vector>

#include "reference.hpp"

namespace {

namespace host = memsafe::host;

using ref::scoped_env;

unsigned available() { return host::isa_compiled & host::cpu_isas(); }

/// The message of the argument_error f() throws ("" when it throws none).
template <class F>
std::string argument_error_of(F&& f) {
  try {
    f();
  } catch (const memsafe::argument_error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

struct knn_data {
  std::vector<float> x = ref::cast<float>(ref::data(21, 5, 91)), y = ref::cast<float>(ref::data(203, 5, 92));
  auto X() { return memsafe::points(x.data(), 21, 5); }
  auto Y() { return memsafe::points(y.data(), 203, 5); }
  auto knn() { return memsafe::argkmin(memsafe::sqdist(X(), Y()), 4); }
};

/// The selections whose screen the screen tests look at: float sqdist at d = 40 (wide) and 7
/// (narrow), double sqdist, float l1, cosine and dot at d = 40.
struct screen_cases {
  static constexpr std::size_t n = 9, m = 150;
  std::vector<float> x32 = ref::cast<float>(ref::data(n, 40, 11)), y32 = ref::cast<float>(ref::data(m, 40, 12));
  std::vector<double> x64 = ref::data(n, 40, 11), y64 = ref::data(m, 40, 12);
  template <class T>
  static auto sq(std::vector<T>& x, std::vector<T>& y, std::size_t d) {
    return memsafe::argkmin(memsafe::sqdist(memsafe::points(x.data(), n, d), memsafe::points(y.data(), m, d)), 3);
  }
  auto wide() { return sq(x32, y32, 40); }
  auto narrow() { return sq(x32, y32, 7); }
  auto dbl() { return sq(x64, y64, 40); }
  auto l1() { return memsafe::argkmin(memsafe::l1(memsafe::points(x32.data(), n, 40), memsafe::points(y32.data(), m, 40)), 3); }
  auto cos() {
    return memsafe::argkmin(memsafe::cosine(memsafe::points(x32.data(), n, 40), memsafe::points(y32.data(), m, 40)), 3);
  }
  auto dot() {
    return memsafe::argkmax(memsafe::dot(memsafe::points(x32.data(), n, 40), memsafe::points(y32.data(), m, 40)), 3);
  }
};

}  // namespace

TEST_CASE("isa: names parse strictly") {
  CHECK(host::parse_isa("avx512") == host::isa::avx512);
  CHECK(host::parse_isa("avx2") == host::isa::avx2);
  CHECK(host::parse_isa("portable") == host::isa::portable);
  CHECK(host::parse_isa("  AVX2 ") == host::isa::avx2);
  CHECK(host::parse_isa("Portable\n") == host::isa::portable);
  for (const char* bad : {"", " ", "avx", "avx2x", "avx-512", "avx512f", "sse", "auto", "avx2 fma", "2"})
    CHECK_MESSAGE(!host::parse_isa(bad).has_value(), "\"" << bad << "\"");
  for (host::isa i : host::isa_all) CHECK(host::parse_isa(host::isa_name(i)) == i);
}

TEST_CASE("isa: the CPU's instruction sets agree with the compiler's own detection") {
  const unsigned cpu = host::cpu_isas();
  CHECK((cpu & host::isa_bit(host::isa::portable)) != 0);
  MESSAGE("this CPU runs: " << host::isa_list(cpu) << "; this build has kernels for: " << host::isa_list(host::isa_compiled)
                            << "; default: " << std::string(host::isa_name(host::best_isa(available()))));
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  // libgcc's / compiler-rt's detection also checks that the OS saves the registers (XCR0).
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  CHECK(((cpu & host::isa_bit(host::isa::avx2)) != 0) == avx2);
  CHECK(((cpu & host::isa_bit(host::isa::avx512)) != 0) == avx512);
#endif
  CHECK(host::cpu_isas() == cpu);  // asked once, cached
}

TEST_CASE("isa: by default the best instruction set available runs, and the plan says which") {
  scoped_env unset_isa("MEMSAFE_ISA", nullptr), unset_kernels("MEMSAFE_KERNELS", nullptr);
  knn_data k;
  const auto best = host::best_isa(available());
  const auto r = memsafe::eval(k.knn(), memsafe::options{memsafe::unlimited, 1});
  CHECK(r.stats.plan.isa == host::isa_name(best));
  CHECK(memsafe::plan_for(k.knn()).isa == host::isa_name(best));
  CHECK(contains(memsafe::explain(k.knn()), std::string("isa:          ") + host::isa_name(best) + "\n"));
  {
    scoped_env empty("MEMSAFE_ISA", "");  // an empty variable counts as unset
    CHECK(memsafe::plan_for(k.knn()).isa == host::isa_name(best));
  }
  // A row job the fused kernels do not serve (cosine: the fused sums take the stationary and dot
  // formulas, tests/test_fused_sums.cpp) runs the portable tile path, and says so.
  std::vector<float> v(203, 1.0f);
  const auto mv = memsafe::plan_for(memsafe::cosine(k.X(), k.Y()) * memsafe::vec(v.data(), 203));
  CHECK(mv.isa == "portable");
  CHECK(contains(mv.describe(), "isa:          portable\n"));
}

TEST_CASE("isa: MEMSAFE_ISA forces each available instruction set and MEMSAFE_KERNELS=reference wins") {
  scoped_env unset_kernels("MEMSAFE_KERNELS", nullptr);
  knn_data k;
  for (host::isa i : host::isa_all) {
    if (!(available() & host::isa_bit(i))) continue;
    scoped_env force("MEMSAFE_ISA", host::isa_name(i));
    const auto r = memsafe::eval(k.knn(), memsafe::options{memsafe::unlimited, 2});
    CHECK(r.stats.plan.isa == host::isa_name(i));
    CHECK(contains(r.stats.plan.describe(), std::string("isa:          ") + host::isa_name(i) + "\n"));
    CHECK(contains(r.stats.plan.reduction, "fused: screened") == (i != host::isa::portable));
  }
  scoped_env force("MEMSAFE_ISA", "avx2");
  scoped_env reference("MEMSAFE_KERNELS", "reference");
  CHECK(memsafe::plan_for(k.knn()).isa == "portable");
  // surrounding spaces are ignored, as for every variable (" reference" was taken as another value)
  scoped_env spaced("MEMSAFE_KERNELS", " reference\n");
  CHECK(memsafe::plan_for(k.knn()).isa == "portable");
  scoped_env blank("MEMSAFE_KERNELS", "   ");  // counts as unset: MEMSAFE_ISA=avx2 applies
  if (available() & host::isa_bit(host::isa::avx2)) CHECK(memsafe::plan_for(k.knn()).isa == "avx2");
}

TEST_CASE("isa: a MEMSAFE_ISA that is not a name is an argument_error quoting it") {
  scoped_env unset_kernels("MEMSAFE_KERNELS", nullptr);
  knn_data k;
  for (const char* bad : {"avx3", "AVX2X", "sse4", "fastest"}) {
    scoped_env force("MEMSAFE_ISA", bad);
    const std::string e = argument_error_of([&] { (void)memsafe::eval(k.knn()); });
    CHECK_MESSAGE(contains(e, std::string("MEMSAFE_ISA must be avx512, avx2 or portable, got \"") + bad + "\""), e);
    CHECK(contains(argument_error_of([&] { (void)memsafe::plan_for(k.knn()); }), "MEMSAFE_ISA must be"));
  }
}

TEST_CASE("isa: a malformed MEMSAFE_ISA or MEMSAFE_SCREEN is refused by every host evaluation, not only by those whose kernels read it") {
  // dense tiles, sums of two formulas, lazy x lazy and dense chains ran with either ignored
  scoped_env unset_kernels("MEMSAFE_KERNELS", nullptr);
  std::vector<double> x(12 * 3), v(12, 1.0), M(12 * 12, 0.5);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1 * double(i % 7);
  const auto X = memsafe::points(static_cast<const double*>(x.data()), 12, 3);
  const auto K = memsafe::rbf(X, X, 1.0);
  const auto A = memsafe::matrix(static_cast<const double*>(M.data()), 12, 12);
  const auto V = memsafe::vec(static_cast<const double*>(v.data()), 12);
  const auto all = [&](auto&& check) {
    check([&] { (void)memsafe::eval(memsafe::dense(K)); });
    check([&] { (void)memsafe::eval(memsafe::sum(2.0 * memsafe::sqdist(X, X) + K)); });
    check([&] { (void)memsafe::eval(K * memsafe::transpose(K)); });
    check([&] { (void)memsafe::eval(A.t() * A * V); });
    check([&] { (void)memsafe::plan_for(memsafe::dense(K)); });
    check([&] { (void)memsafe::explain(A.t() * A * V); });
  };
  {
    scoped_env bad("MEMSAFE_ISA", "garbage");
    all([](auto&& f) { CHECK(contains(argument_error_of(f), "MEMSAFE_ISA must be avx512, avx2 or portable, got \"garbage\"")); });
  }
  {
    scoped_env bad("MEMSAFE_SCREEN", "garbage");
    all([](auto&& f) { CHECK(contains(argument_error_of(f), "MEMSAFE_SCREEN must be fp32, bf16, amx or i16, got \"garbage\"")); });
    CHECK(contains(argument_error_of([&] { (void)memsafe::eval(K * V); }), "MEMSAFE_SCREEN must be"));
  }
  {
    scoped_env fine("MEMSAFE_SCREEN", "fp32");  // a valid word where no selection screens: nothing to refuse
    all([](auto&& f) { CHECK_NOTHROW(f()); });
  }
}

TEST_CASE("isa: forcing an instruction set this CPU lacks is a clear error naming what it runs") {
  scoped_env unset_kernels("MEMSAFE_KERNELS", nullptr);
  knn_data k;
  bool any = false;
  for (host::isa i : {host::isa::avx512, host::isa::avx2}) {
    if (available() & host::isa_bit(i)) continue;
    any = true;
    scoped_env force("MEMSAFE_ISA", host::isa_name(i));
    const std::string e = argument_error_of([&] { (void)memsafe::eval(k.knn()); });
    INFO(e);
    if (host::isa_compiled & host::isa_bit(i)) {
      CHECK(contains(e, std::string("MEMSAFE_ISA=") + host::isa_name(i) + ": this CPU does not run " +
                            host::isa_name(i)));
      CHECK(contains(e, "it runs: " + host::isa_list(host::cpu_isas())));
    } else {
      CHECK(contains(e, "this translation unit has no"));
    }
    // Nothing ran: the error comes from planning, before any temporary.
    CHECK(contains(argument_error_of([&] { (void)memsafe::plan_for(k.knn()); }), "MEMSAFE_ISA="));
  }
  if (!any) MESSAGE("skipped: this CPU runs every instruction set of the kernels (" << host::isa_list(available()) << ")");
}

TEST_CASE("isa: the bfloat16 screen — default choice, MEMSAFE_SCREEN, and what the plan says") {
  scoped_env unset_kernels("MEMSAFE_KERNELS", nullptr);
  scoped_env unset_isa("MEMSAFE_ISA", nullptr);
  scoped_env unset_screen("MEMSAFE_SCREEN", nullptr);
  screen_cases c;
  const auto wide = c.wide(), narrow = c.narrow();
  const auto dbl = c.dbl();
  const auto l1 = c.l1();
  const auto cos = c.cos();
  const auto dot = c.dot();
  const bool avx512 = available() & host::isa_bit(host::isa::avx512);
  const bool bf16 = avx512 && host::cpu_has_avx512bf16();
  if (!bf16) MESSAGE("the bfloat16 screen is not available here (AVX-512: " << avx512 << "): only its errors are checked");
  // By default: float sqdist, cosine and dot at d >= 16 on AMX tiles where the CPU and OS offer
  // them, else at d >= 8 in bfloat16 on AVX-512 with AVX512-BF16 where VDPBF16PS pays (AMD); sqdist
  // at d >= 16 in int16 on an AVX2-only CPU; the rest keeps the FP32 screen.
  const bool avx2 = available() & host::isa_bit(host::isa::avx2);
  const bool amx = bf16 && host::cpu_has_amx_bf16();
  const std::string want = amx                                 ? "amx"
                           : bf16 && host::cpu_dpbf16_pays()   ? "bf16"
                           : avx512                            ? "fp32"
                           : avx2                              ? "i16"
                                                               : "";
  CHECK(memsafe::plan_for(wide).screen == want);
  if (available() != host::isa_bit(host::isa::portable)) {
    CHECK(memsafe::plan_for(narrow).screen == "fp32");
    CHECK(memsafe::plan_for(dbl).screen == "fp64");  // double screens in double
    CHECK(memsafe::plan_for(l1).screen == "fp32");
    // cosine, dot: on AMX tiles or VDPBF16PS where it pays, as sqdist; never int16
    const std::string paired = amx ? "amx" : bf16 && host::cpu_dpbf16_pays() ? "bf16" : "fp32";
    CHECK(memsafe::plan_for(cos).screen == paired);
    CHECK(memsafe::plan_for(dot).screen == paired);
    CHECK(contains(memsafe::explain(wide), "screen:       " + want + "\n"));
  }
  {
    scoped_env off("MEMSAFE_SCREEN", "fp32");
    if (available() != host::isa_bit(host::isa::portable)) CHECK(memsafe::plan_for(wide).screen == "fp32");
  }
  if (bf16) {
    scoped_env force("MEMSAFE_SCREEN", "bf16");
    CHECK(memsafe::plan_for(narrow).screen == "bf16");  // forced at every d
    CHECK(memsafe::plan_for(dbl).screen == "fp64");     // where it applies only
    CHECK(memsafe::plan_for(l1).screen == "fp32");
    CHECK(memsafe::plan_for(cos).screen == "bf16");
    CHECK(memsafe::plan_for(dot).screen == "bf16");
    const auto r = memsafe::eval(narrow, memsafe::options{memsafe::unlimited, 2});
    CHECK(contains(r.stats.plan.reduction, "bfloat16"));
    scoped_env avx2("MEMSAFE_ISA", "avx2");
    if (available() & host::isa_bit(host::isa::avx2)) {
      const std::string e = argument_error_of([&] { (void)memsafe::plan_for(wide); });
      CHECK_MESSAGE(contains(e, "MEMSAFE_SCREEN=bf16: the bfloat16 screen runs on the AVX-512 kernels, not avx2"), e);
    }
  } else if (avx512) {
    scoped_env force("MEMSAFE_SCREEN", "bf16");
    const std::string e = argument_error_of([&] { (void)memsafe::eval(wide); });
    CHECK_MESSAGE(contains(e, "MEMSAFE_SCREEN=bf16: this CPU has no AVX512-BF16"), e);
  }
  if (amx) {  // the AMX screen, forced: at every d, float sqdist only, with the AVX-512 kernels only
    scoped_env force("MEMSAFE_SCREEN", "amx");
    CHECK(memsafe::plan_for(narrow).screen == "amx");
    CHECK(memsafe::plan_for(dbl).screen == "fp64");
    CHECK(memsafe::plan_for(l1).screen == "fp32");
    CHECK(memsafe::plan_for(cos).screen == "amx");
    CHECK(memsafe::plan_for(dot).screen == "amx");
    const auto r = memsafe::eval(wide, memsafe::options{memsafe::unlimited, 2});
    CHECK(contains(r.stats.plan.reduction, "AMX tiles"));
    scoped_env avx2("MEMSAFE_ISA", "avx2");
    if (available() & host::isa_bit(host::isa::avx2)) {
      const std::string e = argument_error_of([&] { (void)memsafe::plan_for(wide); });
      CHECK_MESSAGE(contains(e, "MEMSAFE_SCREEN=amx: the AMX screen runs with the AVX-512 kernels, not avx2"), e);
    }
  } else if (available() != host::isa_bit(host::isa::portable)) {
    MESSAGE("the AMX screen is not available here: only its error is checked");
    scoped_env force("MEMSAFE_SCREEN", "amx");
    const std::string e = argument_error_of([&] { (void)memsafe::eval(wide); });
    CHECK_MESSAGE(contains(e, "MEMSAFE_SCREEN=amx: "), e);
  }
  for (const char* bad : {"BF16", "fp16", "auto", "bfloat16"}) {
    scoped_env force("MEMSAFE_SCREEN", bad);
    if (available() == host::isa_bit(host::isa::portable)) break;  // no fused selection: nothing reads it
    const std::string e = argument_error_of([&] { (void)memsafe::plan_for(wide); });
    CHECK_MESSAGE(contains(e, std::string("MEMSAFE_SCREEN must be fp32, bf16, amx or i16, got \"") + bad + "\""), e);
  }
}

TEST_CASE("isa: the int16 screen — chosen on the AVX2 kernels, MEMSAFE_SCREEN=i16, and what the plan says") {
  scoped_env unset_kernels("MEMSAFE_KERNELS", nullptr);
  scoped_env unset_screen("MEMSAFE_SCREEN", nullptr);
  if (!(available() & host::isa_bit(host::isa::avx2))) {
    MESSAGE("skipped: the AVX2 kernels (this CPU and build run: " << host::isa_list(available()) << ")");
    return;
  }
  screen_cases c;
  const auto wide = c.wide(), narrow = c.narrow();
  const auto dbl = c.dbl();
  const auto l1 = c.l1();
  const auto cos = c.cos();
  const auto dot = c.dot();
  {
    scoped_env avx2("MEMSAFE_ISA", "avx2");
    // By default on the AVX2 kernels: float sqdist at d >= 16; the rest keeps the FP32/FP64 screen.
    CHECK(memsafe::plan_for(wide).screen == "i16");
    CHECK(memsafe::plan_for(narrow).screen == "fp32");
    CHECK(memsafe::plan_for(dbl).screen == "fp64");
    CHECK(memsafe::plan_for(l1).screen == "fp32");
    CHECK(memsafe::plan_for(cos).screen == "fp32");
    CHECK(memsafe::plan_for(dot).screen == "fp32");
    CHECK(contains(memsafe::explain(wide), "screen:       i16\n"));
    const auto r = memsafe::eval(wide, memsafe::options{memsafe::unlimited, 2});
    CHECK(contains(r.stats.plan.reduction, host::cpu_has_avx_vnni() ? "int16 dot products (AVX-VNNI) with a proven margin"
                                                                     : "int16 dot products with a proven margin"));
    scoped_env force("MEMSAFE_SCREEN", "i16");
    CHECK(memsafe::plan_for(narrow).screen == "i16");  // forced at every d
    CHECK(memsafe::plan_for(dbl).screen == "fp64");    // where it applies only
    CHECK(memsafe::plan_for(cos).screen == "fp32");    // sqdist only
    CHECK(memsafe::plan_for(dot).screen == "fp32");
    scoped_env off("MEMSAFE_SCREEN", "fp32");
    CHECK(memsafe::plan_for(wide).screen == "fp32");
  }
  if (available() & host::isa_bit(host::isa::avx512)) {
    scoped_env avx512("MEMSAFE_ISA", "avx512");
    scoped_env force("MEMSAFE_SCREEN", "i16");
    const std::string e = argument_error_of([&] { (void)memsafe::plan_for(wide); });
    CHECK_MESSAGE(contains(e, "MEMSAFE_SCREEN=i16: the int16 screen runs on the AVX2 kernels, not avx512"), e);
  }
}
