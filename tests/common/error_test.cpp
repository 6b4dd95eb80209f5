#include "common/error.h"

#include <gtest/gtest.h>

namespace stoker {
namespace {

// A failed STOKER_CHECK reads as the sentence it was given; the condition and the source location are
// kept apart for the debug log (the trainer writes them to the run's log file, not to the screen).
TEST(Error, ACheckSaysItsMessageAndKeepsTheLocationApart) {
  const int n = 0;
  try {
    STOKER_CHECK(n > 0, "data.workers: expected a positive count, got {}; set data.workers: 2", n);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "data.workers: expected a positive count, got 0; set data.workers: 2");
    EXPECT_NE(e.location().find("check 'n > 0' failed at "), std::string::npos) << e.location();
    EXPECT_NE(e.location().find("error_test.cpp:"), std::string::npos) << e.location();
  }
  try {
    STOKER_FAIL("no location for {}", "STOKER_FAIL");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "no location for STOKER_FAIL");
    EXPECT_TRUE(e.location().empty());
  }
}

}  // namespace
}  // namespace stoker
