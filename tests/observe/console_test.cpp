// The console sink's progress display (observe/console.h).
#include "observe/console.h"

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "test_util.h"

namespace stoker {
namespace {

TEST(Console, TheProgressLineShowsGpuIdleOnlyWhenMeasured) {
  for (const double idle : {0.123, -1.0}) {
    std::FILE* out = std::tmpfile();
    ASSERT_NE(out, nullptr);
    Progress progress(/*live=*/false, /*every=*/1, out);
    ProgressUpdate u;
    u.epoch = u.epochs = u.step = u.steps = 1;
    u.gpu_idle = idle;
    progress.update(u);
    std::rewind(out);
    char line[512] = {};
    ASSERT_NE(std::fgets(line, sizeof line, out), nullptr);
    std::fclose(out);
    if (idle >= 0) {
      EXPECT_CONTAINS(std::string(line), "gpu_idle 12.3%");
    } else {
      EXPECT_EQ(std::string(line).find("gpu_idle"), std::string::npos) << line;
    }
  }
}

}  // namespace
}  // namespace stoker
