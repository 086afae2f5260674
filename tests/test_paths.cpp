// The only test object that depends on where the checkout is (see test_paths.h).
#include "test_paths.h"

const char* tfm::test::source_dir_path() { return TFM_TEST_SOURCE_DIR; }
const char* tfm::test::tfm_binary_path() { return TFM_TEST_BINARY; }
