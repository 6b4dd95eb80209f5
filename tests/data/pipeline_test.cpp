#include "data/pipeline.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "common/error.h"
#include "data/transform_options.h"
#include "test_util.h"

namespace stoker::data {
namespace {

using stoker::testing::error_of;
using stoker::testing::TempDir;

std::vector<uint8_t> pattern(int64_t h, int64_t w, int64_t c, int64_t salt) {
  std::vector<uint8_t> p(static_cast<size_t>(h * w * c));
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>((i * 7 + salt * 31 + i / 5) % 256);
  return p;
}

// Three PNG files of different sizes.
std::vector<std::string> png_files(const TempDir& dir) {
  std::vector<std::string> files;
  for (int64_t i = 0; i < 3; ++i) {
    const auto path = dir / ("im" + std::to_string(i) + ".png");
    stoker::testing::write_png(path, 20 + 4 * i, 30 - 3 * i, 3, pattern(20 + 4 * i, 30 - 3 * i, 3, i));
    files.push_back(path.string());
  }
  return files;
}

TransformPipeline resize_then_crop(int64_t resize, int64_t crop) {
  std::vector<TypedOptions> list = {make_transform("resize"), make_transform("center_crop")};
  list[0].as<ResizeOptions>().size = resize;
  list[1].as<CenterCropOptions>().size = crop;
  return make_transform_pipeline(list);
}

TEST(SamplePipeline, StagesCalledOneAtATimeEqualLoadAndAreEachTimed) {
  TempDir dir;
  const auto files = png_files(dir);
  SamplePipeline p(std::make_shared<ImageFilesDataset>(files, 3),
                   SamplePipelineOptions().set_transforms(resize_then_crop(18, 16)));
  ASSERT_TRUE(p.fixed_output());
  EXPECT_EQ(p.slot_bytes(), 16 * 16 * 3);
  SampleWork work;
  for (int64_t i = 0; i < 3; ++i) {
    std::vector<uint8_t> staged(p.slot_bytes()), loaded(p.slot_bytes());
    p.read(i, work);
    p.decode(42, work);
    EXPECT_EQ(work.plan.out_height, 16);
    p.transform(work, staged.data());
    EXPECT_EQ(p.load(i, 42, loaded.data(), work), -1) << "image files have no labels";
    EXPECT_EQ(staged, loaded) << "image " << i;
  }
  const StageTimes t = p.take_times();
  EXPECT_GT(t.read, 0.0);
  EXPECT_GT(t.decode, 0.0);
  EXPECT_GT(t.transform, 0.0);
  // Six reads (read, then load, of each image), each opening its file and handing out its bytes.
  int64_t bytes = 0;
  for (const auto& f : files) bytes += static_cast<int64_t>(std::filesystem::file_size(f));
  EXPECT_EQ(t.read_opens, 6);
  EXPECT_EQ(t.read_bytes, 2 * bytes);
  const StageTimes again = p.take_times();
  EXPECT_EQ(again.read, 0.0) << "take_times resets";
  EXPECT_EQ(again.read_opens, 0);
  EXPECT_EQ(again.read_bytes, 0);
}

// What `trainer predict` does: images of any size, no fixed crop.
TEST(SamplePipeline, ImagesOfAnySizeWithoutAFixedCrop) {
  TempDir dir;
  const auto files = png_files(dir);
  SamplePipeline p(std::make_shared<ImageFilesDataset>(files, 3), SamplePipelineOptions());
  EXPECT_FALSE(p.fixed_output());
  SampleWork work;
  p.read(2, work);
  p.decode(0, work);
  ASSERT_EQ(work.plan.out_height, 28);
  ASSERT_EQ(work.plan.out_width, 24);
  std::vector<uint8_t> out(28 * 24 * 3);
  p.transform(work, out.data());
  EXPECT_EQ(out, pattern(28, 24, 3, 2));
  std::vector<uint8_t> slot(28 * 24 * 3);
  EXPECT_CONTAINS(error_of([&] { p.load(0, 0, slot.data(), work); }),
                  files[0] + ": images differ in size, so the transforms must end in a fixed-size crop");
}

TEST(ImageFilesDataset, ErrorsNameTheFileAndWhy) {
  TempDir dir;
  stoker::testing::write_bytes(dir / "empty.png", "");
  ImageFilesDataset files({(dir / "absent.png").string(), (dir / "empty.png").string(), dir.path().string()}, 1);
  RawSample raw;
  EXPECT_CONTAINS(error_of([&] { files.read(0, raw); }), "cannot read image " + (dir / "absent.png").string() + ": no such file");
  EXPECT_CONTAINS(error_of([&] { files.read(1, raw); }), (dir / "empty.png").string() + ": the file is empty");
  EXPECT_CONTAINS(error_of([&] { files.read(2, raw); }), "it is a folder");
  EXPECT_CONTAINS(error_of([] { ImageFilesDataset({"a.png"}, 4); }), "1 (gray) or 3 (RGB) channels, not 4");
}

// 10 labelled 4x4 gray images; sample `bad` cannot be read.
class Flaky : public Dataset {
 public:
  explicit Flaky(int64_t bad) : bad_(bad) {}
  int64_t size() const override { return 10; }
  int64_t num_classes() const override { return 10; }
  int64_t channels() const override { return 1; }
  int64_t height() const override { return 4; }
  int64_t width() const override { return 4; }
  void read(int64_t index, RawSample& out) const override {
    STOKER_CHECK(index != bad_, "{}: corrupt (test)", describe(index));
    out.encoded = false;
    out.image = Image{4, 4, 1, pattern(4, 4, 1, index)};
    out.label = index;
  }
  std::string describe(int64_t index) const override { return "f" + std::to_string(index) + ".png"; }

 private:
  int64_t bad_;
};

TEST(SamplePipeline, BadSamplesAreReplacedTheSameWayEachTime) {
  std::vector<std::string> warnings;
  std::mutex mutex;
  auto options = SamplePipelineOptions().set_skip_bad_samples(true).set_warn([&](const std::string& m) {
    std::lock_guard<std::mutex> lock(mutex);
    warnings.push_back(m);
  });
  SamplePipeline p(std::make_shared<Flaky>(3), options);
  SampleWork work;
  std::vector<uint8_t> slot(16), other(16);
  const int64_t label = p.fill(3, 77, slot.data(), work);
  const int64_t replacement = (3 + 7919) % 10;
  EXPECT_EQ(label, replacement);
  EXPECT_EQ(p.load(replacement, mix_seed(77, 1), other.data(), work), replacement);
  EXPECT_EQ(slot, other);
  EXPECT_EQ(p.take_times().bad_samples, 1);
  EXPECT_EQ(p.bad_samples(), std::vector<std::string>{"f3.png"});
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_CONTAINS(warnings[0], "skipping bad sample 3: f3.png: corrupt (test)");

  SamplePipeline strict(std::make_shared<Flaky>(3), SamplePipelineOptions());
  EXPECT_CONTAINS(error_of([&] { strict.fill(3, 77, slot.data(), work); }), "f3.png: corrupt (test)");
}

// A data set wrapped in a cache of its raw samples (what the doctor's cached rungs do) gives the
// pipeline the same samples.
class RawCache : public Dataset {
 public:
  explicit RawCache(std::shared_ptr<Dataset> inner) : inner_(std::move(inner)) {}
  int64_t size() const override { return inner_->size(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  int64_t channels() const override { return inner_->channels(); }
  void read(int64_t index, RawSample& out) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(index);
    if (it == cache_.end()) {
      inner_->read(index, out);
      cache_.emplace(index, out);
    } else {
      out = it->second;
    }
  }
  std::string describe(int64_t index) const override { return inner_->describe(index); }
  size_t cached() const { return cache_.size(); }

 private:
  std::shared_ptr<Dataset> inner_;
  mutable std::mutex mutex_;
  mutable std::map<int64_t, RawSample> cache_;
};

TEST(SamplePipeline, AWrappedDataSetGivesTheSameSamples) {
  TempDir dir;
  auto files = std::make_shared<ImageFilesDataset>(png_files(dir), 3);
  auto cache = std::make_shared<RawCache>(files);
  SamplePipeline direct(files, SamplePipelineOptions().set_transforms(resize_then_crop(20, 12)));
  SamplePipeline cached(cache, SamplePipelineOptions().set_transforms(resize_then_crop(20, 12)));
  SampleWork work;
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t i = 0; i < 3; ++i) {
      std::vector<uint8_t> a(direct.slot_bytes()), b(cached.slot_bytes());
      direct.load(i, 5, a.data(), work);
      cached.load(i, 5, b.data(), work);
      EXPECT_EQ(a, b) << "pass " << pass << " image " << i;
    }
  }
  EXPECT_EQ(cache->cached(), 3u);
}

}  // namespace
}  // namespace stoker::data
