// What the data tests compare batches with (header-only: the data tests' binary links the data layer).
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/batch_source.h"

namespace stoker::testing {

// `got` holds the batches of `want`, index for index and bit for bit; `what` names the case.
inline void expect_same_batches(const std::vector<data::Batch>& got, const std::vector<data::Batch>& want,
                                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t b = 0; b < want.size(); ++b) {
    EXPECT_EQ(got[b].index, want[b].index) << what << ", batch " << b;
    EXPECT_TRUE(torch::equal(got[b].input, want[b].input)) << what << ", batch " << b;
    EXPECT_TRUE(torch::equal(got[b].target, want[b].target)) << what << ", batch " << b;
  }
}

}  // namespace stoker::testing
