// data/resolution.h: the progressive-resizing schedule (FFCV's get_resolution, numbers worked out by
// hand from its formula), transforms made to end at a size, and a RetunableLoader whose epochs change
// size: each epoch is exactly what a Loader built at that size hands out, whatever the workers, and
// wherever the epoch is started (a resumed run).
#include "data/resolution.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/retunable_loader.h"
#include "data/transform_options.h"
#include "data/batch_util.h"
#include "test_util.h"

namespace stoker::data {
namespace {

ResolutionSchedule schedule(int64_t start_size, int64_t end_size, int64_t start_epoch, int64_t end_epoch,
                            int64_t step) {
  ResolutionSchedule s;
  s.start_size = start_size;
  s.end_size = end_size;
  s.start_epoch = start_epoch;
  s.end_epoch = end_epoch;
  s.step = step;
  return s;
}

// FFCV's ResNet-50 88-epoch recipe: min_res 160, max_res 192, start_ramp 65, end_ramp 76. Epoch 70
// interpolates to 174.5 (5.45 x 32: 160), epoch 71 to 177.5 (5.55 x 32: 192).
TEST(ResolutionSchedule, FollowsFfcvsRampOfTheRn50Recipe) {
  const ResolutionSchedule s = schedule(160, 192, 65, 76, 32);
  EXPECT_NO_THROW(s.check());
  for (int64_t e : {0, 30, 65, 66, 70}) EXPECT_EQ(s.size_at(e), 160) << "epoch " << e;
  for (int64_t e : {71, 75, 76, 87, 200}) EXPECT_EQ(s.size_at(e), 192) << "epoch " << e;
}

// 160 -> 224 over epochs 0..4: 176 and 208 are halfway between multiples of 32 (5.5, 6.5); numpy's
// round takes both to the even one, 6: 192.
TEST(ResolutionSchedule, RoundsHalvesToEvenAsNumpy) {
  const ResolutionSchedule s = schedule(160, 224, 0, 4, 32);
  EXPECT_EQ(s.size_at(0), 160);
  EXPECT_EQ(s.size_at(1), 192);
  EXPECT_EQ(s.size_at(2), 192);
  EXPECT_EQ(s.size_at(3), 192);
  EXPECT_EQ(s.size_at(4), 224);
  // Step 16: 176, 192, 208 exactly.
  const ResolutionSchedule fine = schedule(160, 224, 0, 4, 16);
  EXPECT_EQ(fine.size_at(1), 176);
  EXPECT_EQ(fine.size_at(3), 208);
}

TEST(ResolutionSchedule, DescribesTheRunsOfEpochsCountedFromOne) {
  EXPECT_EQ(schedule(160, 192, 1, 3, 32).describe(6), "160 (epochs 1-2), 192 (epochs 3-6)");
  EXPECT_EQ(schedule(8, 16, 0, 2, 4).describe(3), "8 (epoch 1), 12 (epoch 2), 16 (epoch 3)");
}

TEST(ResolutionSchedule, BadSchedulesNameTheKey) {
  EXPECT_CONTAINS(testing::error_of([] { schedule(160, 192, 5, 3, 32).check(); }), "end_epoch (3)");
  EXPECT_CONTAINS(testing::error_of([] { schedule(160, 192, 0, 3, 0).check(); }), "step (0)");
  EXPECT_CONTAINS(testing::error_of([] { schedule(16, 192, 0, 3, 32).check(); }), "at most the smaller size (16)");
}

TypedOptions sized(const std::string& type, int64_t size) {
  TypedOptions t = make_transform(type);
  if (type == "resize") t.as<ResizeOptions>().size = size;
  if (type == "center_crop") t.as<CenterCropOptions>().size = size;
  if (type == "random_crop") t.as<RandomCropOptions>().size = size;
  if (type == "random_resized_crop") t.as<RandomResizedCropOptions>().size = size;
  return t;
}

// The last crop takes the size; a resize before it keeps its ratio (timm's crop_pct); the rest stays.
TEST(WithOutputSize, SetsTheLastCropAndScalesWhatComesBefore) {
  const auto eval = with_output_size({sized("resize", 256), sized("center_crop", 224)}, 160, "data.eval_transforms");
  EXPECT_EQ(eval[0].as<ResizeOptions>().size, 183);  // 256 x 160 / 224 = 182.9
  EXPECT_EQ(eval[1].as<CenterCropOptions>().size, 160);
  EXPECT_EQ(output_size_of(eval), 160);

  TypedOptions flip = make_transform("horizontal_flip");
  flip.as<HorizontalFlipOptions>().p = 0.25;
  const auto train = with_output_size({sized("random_resized_crop", 224), flip}, 176, "data.train_transforms");
  EXPECT_EQ(train[0].as<RandomResizedCropOptions>().size, 176);
  EXPECT_EQ(train[1].as<HorizontalFlipOptions>().p, 0.25);

  TypedOptions padded = sized("random_crop", 32);
  padded.as<RandomCropOptions>().padding = 4;
  const auto cifar = with_output_size({padded}, 24, "data.train_transforms");
  EXPECT_EQ(cifar[0].as<RandomCropOptions>().size, 24);
  EXPECT_EQ(cifar[0].as<RandomCropOptions>().padding, 4);

  // Without a crop the last resize decides.
  EXPECT_EQ(with_output_size({sized("resize", 36), flip}, 40, "k")[0].as<ResizeOptions>().size, 40);
  EXPECT_EQ(output_size_of({flip}), 0);
  EXPECT_CONTAINS(testing::error_of([&] { with_output_size({flip}, 40, "data.train_transforms"); }),
                  "data.train_transforms has no transform whose size can be set");
}

// 40 3-channel 8x8 images, each pixel a function of its sample and position.
std::shared_ptr<TensorImageDataset> images() {
  const int64_t n = 40, bytes = 8 * 8 * 3;
  std::vector<uint8_t> pixels(n * bytes);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < bytes; ++p) pixels[i * bytes + p] = static_cast<uint8_t>((i * 11 + p * 5) % 251);
  }
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = i % 10;
  return std::make_shared<TensorImageDataset>(std::move(pixels), std::move(labels), 8, 8, 3, 10, "images");
}

std::vector<TypedOptions> crops() {
  TypedOptions crop = make_transform("random_resized_crop");
  crop.as<RandomResizedCropOptions>().size = 4;
  return {crop, make_transform("horizontal_flip")};
}

LoaderOptions options(int64_t workers, int64_t size) {
  LoaderOptions o;
  o.batch_size = 8;
  o.seed = 5;
  o.workers = workers;
  o.mean = {0, 0, 0};
  o.std = {1, 1, 1};
  o.transforms = with_output_size(crops(), size, "data.train_transforms");
  return o;
}

using testing::epoch_of;

using testing::expect_same_batches;

// Sizes 4, 6, 8 in epochs 0, 1, 2 (4 -> 8 over epochs 0..2 in steps of 2).
TEST(RetunableLoaderResolution, EachEpochIsALoaderAtItsSizeWhateverTheWorkersAndTheStart) {
  const ResolutionSchedule s = schedule(4, 8, 0, 2, 2);
  std::vector<std::vector<Batch>> want;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    Loader reference(images(), options(0, s.size_at(epoch)));
    want.push_back(epoch_of(reference, epoch));
    ASSERT_EQ(want.back().front().input.size(2), 4 + 2 * epoch);
  }
  for (int64_t workers : {0, 2}) {
    RetunableLoader loader(images(), options(workers, s.size_at(0)));
    loader.set_resolution([s](int64_t e) { return s.size_at(e); }, crops());
    EXPECT_EQ(loader.resolution(), 4);
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      expect_same_batches(epoch_of(loader, epoch), want[epoch], "epoch " + std::to_string(epoch));
      EXPECT_EQ(loader.out_height(), 4 + 2 * epoch);
      EXPECT_EQ(loader.resolution(), 4 + 2 * epoch);
    }
    EXPECT_EQ(loader.options().workers, workers);
  }
  // A run resumed in epoch 2 at batch 3: the loader it starts with is at epoch 0's size.
  RetunableLoader resumed(images(), options(2, s.size_at(0)));
  resumed.set_resolution([s](int64_t e) { return s.size_at(e); }, crops());
  const std::vector<Batch> tail(want[2].begin() + 3, want[2].end());
  expect_same_batches(epoch_of(resumed, 2, 3), tail, "epoch 2 from batch 3");
  // Workers changed mid-epoch keep the epoch's size.
  resumed.start_epoch(1);
  const auto first = resumed.next();
  resumed.set_workers(1, 2);
  std::vector<Batch> got{*first};
  while (auto b = resumed.next()) got.push_back(*b);
  expect_same_batches(got, want[1], "epoch 1 with a worker change");
}

}  // namespace
}  // namespace stoker::data
