#include "data/normalize.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/error.h"
#include "test_util.h"

namespace stoker::data {
namespace {

torch::Tensor images(int64_t b, int64_t h, int64_t w, int64_t c) {
  return torch::arange(b * h * w * c, torch::kInt64).remainder(256).to(torch::kUInt8).view({b, h, w, c});
}

TEST(Normalizer, IsXOver255MinusMeanOverStd) {
  const torch::Tensor x = images(2, 3, 5, 3);
  const Normalizer n(3, NormalizeOptions().set_mean({0.5, 0.4, 0.3}).set_std({0.2, 0.25, 0.3}));
  const torch::Tensor out = n(x);
  const torch::Tensor mean = torch::tensor({0.5, 0.4, 0.3}).view({1, 3, 1, 1});
  const torch::Tensor std = torch::tensor({0.2, 0.25, 0.3}).view({1, 3, 1, 1});
  const torch::Tensor expected = (x.permute({0, 3, 1, 2}).to(torch::kFloat32) / 255.0 - mean) / std;
  EXPECT_EQ(out.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(out.is_contiguous());
  EXPECT_TRUE(torch::allclose(out, expected, 1e-5, 1e-5));
  // The CPU pass and the kernels' ATen reference agree.
  EXPECT_TRUE(torch::allclose(out, kernels::preprocess_images_reference(x, n.folded()), 1e-6, 1e-6));
}

TEST(Normalizer, LayoutAndDtypeOnlyChangeTheForm) {
  const torch::Tensor x = images(2, 4, 4, 3);
  auto o = NormalizeOptions().set_mean({0.1, 0.2, 0.3}).set_std({0.3, 0.2, 0.1});
  const torch::Tensor plain = Normalizer(3, o)(x);
  const torch::Tensor last = Normalizer(3, o.set_channels_last(true))(x);
  EXPECT_TRUE(last.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::equal(plain, last));
  const torch::Tensor half = Normalizer(3, o.set_dtype(torch::kBFloat16))(x);
  EXPECT_EQ(half.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(plain.to(torch::kBFloat16), half));
}

TEST(Normalizer, RejectsWhatItCannotNormalise) {
  using stoker::testing::error_of;
  EXPECT_CONTAINS(error_of([] { Normalizer(1, NormalizeOptions().set_mean({0, 0, 0}).set_std({1, 1, 1})); }),
                  "images have 1 channel(s) but normalisation has 3 mean and 3 std values");
  EXPECT_CONTAINS(error_of([] { Normalizer(1, NormalizeOptions().set_std({0.0})); }), "std[0] must be positive");
  EXPECT_CONTAINS(error_of([] { Normalizer(1, NormalizeOptions().set_dtype(torch::kInt32)); }),
                  "input dtype must be float32, bfloat16 or float16");
  const Normalizer gray(1, NormalizeOptions());
  EXPECT_CONTAINS(error_of([&] { gray(images(1, 2, 2, 3)); }), "normalisation takes uint8 [B, H, W, 1] images");
}

}  // namespace
}  // namespace stoker::data
