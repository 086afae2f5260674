#pragma once
// Where the tests find the source tree and the `tfm` binary. The paths are compiled into one file
// (tests/test_paths.cpp) so that every other test object is the same in every checkout (ccache shares it).
namespace tfm::test {
const char* source_dir_path();  // CMAKE_SOURCE_DIR of the build
const char* tfm_binary_path();  // $<TARGET_FILE:tfm>
}  // namespace tfm::test
#define TFM_SOURCE_DIR (::tfm::test::source_dir_path())
#define TFM_BINARY (::tfm::test::tfm_binary_path())
