// core/shared_library.h: libraries opened on first use. A present library's functions (plain and C variadic,
// noexcept or not) give what the linked ones give; a missing library or symbol is one clear error naming it and
// what needed it, thrown at the call, not at start-up. That tfm itself no longer loads libcurl, cairo and Open MPI
// at start is checked on the binary by the ctest `tfm_start_libraries`; downloads, plots and mpirun runs that now
// go through this seam are tested in test_download / test_hub, test_plot and test_mpi.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "core/shared_library.h"

namespace {

const tfm::SharedLibrary& libm() {
  static const tfm::SharedLibrary lib("libm.so.6", "the test");
  return lib;
}
const tfm::SharedLibrary& libc() {
  static const tfm::SharedLibrary lib("libc.so.6", "the test");
  return lib;
}
const tfm::SharedLibrary& missing() {
  static const tfm::SharedLibrary lib("libtfm-no-such-library.so.7", "imaginary plots");
  return lib;
}

// Declared at namespace scope as the seam's users declare them: these hide the global functions here.
TFM_LAZY_FUNCTION(libc(), strtol);
TFM_LAZY_FUNCTION(libc(), snprintf);
TFM_LAZY_FUNCTION(missing(), atof);

TEST(SharedLibrary, CallsFunctionsOfALoadedLibrary) {
  EXPECT_TRUE(libc().available());
  char* end = nullptr;
  EXPECT_EQ(strtol("ff;", &end, 16), 255);
  EXPECT_EQ(*end, ';');
  char buf[64];
  const int n = snprintf(buf, sizeof buf, "%s=%d %.2f", "rows", 42, 0.125);  // C varargs pass through
  EXPECT_EQ(std::string(buf), "rows=42 0.12");
  EXPECT_EQ(n, 12);
}

TEST(SharedLibrary, MissingLibraryIsAClearErrorAtTheCall) {
  EXPECT_FALSE(missing().available());
  try {
    (void)atof("1.5");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("libtfm-no-such-library.so.7 (needed for imaginary plots) could not be loaded"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("install it"), std::string::npos) << m;
  }
}

TEST(SharedLibrary, MissingSymbolNamesIt) {
  try {
    (void)libm().symbol("tfm_no_such_function");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "libm.so.6 (needed for the test) has no symbol 'tfm_no_such_function'");
  }
}

}  // namespace
