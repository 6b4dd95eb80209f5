// `trainer eval` and `trainer predict` on checkpoints (recipe/tasks.h): unreadable test images left
// out and counted, every precision evaluated as its run trained, class names from the checkpoint,
// TF32 set as the run had it.
#include "recipe/export.h"
#include "recipe/tasks.h"

#include <gtest/gtest.h>
#include <ATen/Context.h>
#include <torch/torch.h>

#include <cmath>

#include "data/transform_options.h"
#include "models/weights/state_dict.h"
#include "recipe/factory.h"
#include "recipe/run.h"
#include "test_config.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;

// An image folder whose test split has broken files: training and `trainer eval` evaluate the
// readable test images only and report how many were left out.
TEST(Evaluate, UnreadableTestImagesAreLeftOutAndCounted) {
  stoker::testing::TempDir data, runs;
  for (int c = 0; c < 2; ++c) {
    for (const char* split : {"train", "val"}) {
      const fs::path folder = data / split / ("class" + std::to_string(c));
      fs::create_directories(folder);
      for (int i = 0; i < 8; ++i) {
        stoker::testing::write_png(folder / (std::to_string(i) + ".png"), 16, 16, 3,
                                   std::vector<uint8_t>(16 * 16 * 3, static_cast<uint8_t>(40 + 160 * c)));
      }
    }
  }
  stoker::testing::write_bytes(data / "val/class0/broken.png", "\x89PNG\r\n\x1a\nnot really");
  stoker::testing::write_bytes(data / "val/class1/empty.jpg", "");
  TrainRequest request;
  request.config = stoker::testing::tiny_config(data.path(), runs.path());
  Config& c = request.config;
  c.data.dataset = data::dataset_type_options("image_folder");
  c.data.num_classes = 2;
  c.data.batch_size = 8;
  c.data.mean = {0.5, 0.5, 0.5};
  c.data.std = {0.25, 0.25, 0.25};
  c.data.train_transforms = {data::make_transform("center_crop")};
  c.data.train_transforms[0].as<data::CenterCropOptions>().size = 16;
  c.data.eval_transforms = c.data.train_transforms;
  c.train.epochs = 1;
  const TrainOutcome out = run_training(request);
  EXPECT_EQ(out.final_test.samples, 16);
  EXPECT_EQ(out.final_test.excluded, 2);
  const std::string metrics = stoker::testing::read_bytes(out.run_dir / "metrics.jsonl");
  EXPECT_CONTAINS(metrics, "\"test_samples\":16,\"test_excluded\":2");
  const CheckpointEvaluation eval = evaluate_checkpoint(c, out.run_dir / "checkpoints" / "last.pt");
  EXPECT_EQ(eval.model.samples, 16);
  EXPECT_EQ(eval.model.excluded, 2);
  EXPECT_NEAR(eval.model.loss, out.final_test.loss, 1e-6);
}

// `trainer eval` and `trainer predict` evaluate a checkpoint as its run did, in every precision
// (issue #12: eval of a bf16-mixed run failed with "Input type (CPUBFloat16Type) and weight type
// (CPUFloatType) should be the same"): the checkpoint's test metrics equal the run's last epoch's.
TEST(Evaluate, CheckpointsOfEveryPrecisionEvaluateAsTheirRunDid) {
  stoker::testing::TempDir data, runs;
  stoker::testing::write_synthetic_idx_dataset(data.path(), 128, 64, 12);
  for (const char* precision : {"fp32", "bf16-mixed", "fp16-mixed", "bf16-true"}) {
    TrainRequest request;
    request.config = stoker::testing::tiny_config(data.path(), runs.path());
    request.config.train.epochs = 1;
    request.config.train.precision = parse_precision(precision);
    const TrainOutcome out = run_training(request);
    const fs::path last = out.run_dir / "checkpoints" / "last.pt";
    const CheckpointEvaluation eval = evaluate_checkpoint(request.config, last);
    EXPECT_EQ(eval.model.samples, out.final_test.samples) << precision;
    EXPECT_NEAR(eval.model.top1, out.final_test.top1, 1e-9) << precision;
    EXPECT_NEAR(eval.model.loss, out.final_test.loss, 1e-3 * std::max(1.0, out.final_test.loss)) << precision;

    // predict on one test image, through the saved config.
    const fs::path image = runs.path() / (std::string(precision) + ".png");
    std::vector<uint8_t> pixels(12 * 12);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 37) % 251);
    stoker::testing::write_png(image, 12, 12, 1, pixels);
    PredictRequest predict;
    predict.checkpoint = last;
    predict.images = {image};
    predict.top_k = 3;
    const std::vector<ImagePrediction> p = predict_images(predict);
    ASSERT_EQ(p.size(), 1u) << precision;
    ASSERT_EQ(p[0].classes.size(), 3u) << precision;
    EXPECT_GE(p[0].probabilities[0], p[0].probabilities[1]) << precision;
    // No class names in the data (data.idx.class_names: indices): the indices stand for them.
    EXPECT_EQ(p[0].names[0], std::to_string(p[0].classes[0])) << precision;
  }
}

// With data.idx.class_names: fashion_mnist, the checkpoint carries the ten names and predict gives them.
TEST(Evaluate, PredictNamesClassesFromTheCheckpoint) {
  stoker::testing::TempDir data, runs;
  stoker::testing::write_synthetic_idx_dataset(data.path(), 64, 32, 12);
  TrainRequest request;
  request.config = stoker::testing::tiny_config(data.path(), runs.path());
  request.config.train.epochs = 1;
  request.config.data.dataset.as<data::IdxOptions>().class_names = "fashion_mnist";
  const TrainOutcome out = run_training(request);
  const fs::path last = out.run_dir / "checkpoints" / "last.pt";
  EXPECT_EQ(read_checkpoint_class_names(last), data::fashion_mnist_class_names());
  const fs::path image = runs.path() / "x.png";
  stoker::testing::write_png(image, 12, 12, 1, std::vector<uint8_t>(144, 200));
  PredictRequest predict;
  predict.checkpoint = last;
  predict.images = {image};
  predict.top_k = 10;
  const std::vector<ImagePrediction> p = predict_images(predict);
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(p[0].names.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(p[0].names[i], data::fashion_mnist_class_names()[p[0].classes[i]]) << i;
  }

  // export --format state_dict: the checkpoint's weights, loadable (strictly) into the same model.
  ExportRequest e;
  e.checkpoint = last;
  e.output = runs.path() / "weights.pth";
  export_checkpoint(e);
  torch::nn::AnyModule from_checkpoint = make_model(request.config, {1}), from_export = make_model(request.config, {1});
  load_checkpoint(last, *from_checkpoint.ptr(), nullptr, torch::kCPU);
  models::weights::load_state_dict(*from_export.ptr(), e.output);
  const auto want = from_checkpoint.ptr()->named_parameters(), got = from_export.ptr()->named_parameters();
  ASSERT_EQ(want.size(), got.size());
  for (const auto& item : want) EXPECT_TRUE(torch::equal(item.value(), got[item.key()])) << item.key();
  e.use_ema = true;
  EXPECT_CONTAINS(testing::error_of([&] { export_checkpoint(e); }), "has no EMA weights");
  e.use_ema = false;
  e.format = "onnx";
  EXPECT_CONTAINS(testing::error_of([&] { export_checkpoint(e); }), "a .pth file holds state_dict, not onnx");
}

// `trainer eval` sets TF32 as the run's Trainer did: off for fp32 (IEEE float32 convolutions and
// matmuls on CUDA, whatever the process had before), allowed for tf32.
TEST(Evaluate, CheckpointEvaluationSetsTf32AsTheRunDid) {
  stoker::testing::TempDir data, runs;
  stoker::testing::write_synthetic_idx_dataset(data.path(), 64, 32, 12);
  TrainRequest request;
  request.config = stoker::testing::tiny_config(data.path(), runs.path());
  request.config.train.epochs = 1;
  const fs::path last = run_training(request).run_dir / "checkpoints" / "last.pt";
  const bool cublas = at::globalContext().allowTF32CuBLAS(), cudnn = at::globalContext().allowTF32CuDNN();
  at::globalContext().setAllowTF32CuBLAS(true);
  at::globalContext().setAllowTF32CuDNN(true);
  evaluate_checkpoint(request.config, last);
  EXPECT_FALSE(at::globalContext().allowTF32CuBLAS());
  EXPECT_FALSE(at::globalContext().allowTF32CuDNN());
  request.config.train.precision = Precision::kTf32;
  evaluate_checkpoint(request.config, last);
  EXPECT_TRUE(at::globalContext().allowTF32CuBLAS());
  EXPECT_TRUE(at::globalContext().allowTF32CuDNN());
  at::globalContext().setAllowTF32CuBLAS(cublas);
  at::globalContext().setAllowTF32CuDNN(cudnn);
}

}  // namespace
}  // namespace stoker
