// Top-k counting on hand-made logits, epoch metrics by name, and checkpoint evaluation.
#include "trainer/evaluate.h"

#include <gtest/gtest.h>
#include <ATen/Context.h>
#include <torch/torch.h>

#include <cmath>

#include "test_util.h"
#include "trainer/run.h"
#include "models/state_dict.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;

TEST(Evaluate, TopKOnHandMadeLogits) {
  // 7 classes; the target's rank in each row (0 = highest): 0, 1, 4, 5, 6.
  const torch::Tensor logits = torch::tensor({{9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0},
                                              {1.0, 9.0, 2.0, 3.0, 4.0, 5.0, 6.0},
                                              {7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0},
                                              {7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0},
                                              {7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0}});
  const torch::Tensor target = torch::tensor({0, 6, 4, 5, 6}, torch::kInt64);
  EXPECT_EQ(count_topk_correct(logits, target, 1).item<int64_t>(), 1);
  EXPECT_EQ(count_topk_correct(logits, target, 2).item<int64_t>(), 2);
  EXPECT_EQ(count_topk_correct(logits, target, 5).item<int64_t>(), 3);
  EXPECT_EQ(count_topk_correct(logits, target, 6).item<int64_t>(), 4);
  // k beyond the number of classes counts every row.
  EXPECT_EQ(count_topk_correct(logits.slice(1, 0, 3), torch::tensor({2, 1, 0, 0, 1}, torch::kInt64), 5).item<int64_t>(), 5);
  EXPECT_THROW(count_topk_correct(logits, target.slice(0, 0, 3), 5), Error);
}

TEST(Evaluate, EpochMetricsByName) {
  EpochResult r;
  r.test = {0.5, 0.8, 0.95, 100};
  EXPECT_EQ(epoch_metric(r, "test_loss"), 0.5);
  EXPECT_EQ(epoch_metric(r, "test_top1"), 0.8);
  EXPECT_EQ(epoch_metric(r, "test_top5"), 0.95);
  EXPECT_TRUE(std::isnan(epoch_metric(r, "ema_test_top1"))) << "no EMA evaluated";
  r.ema_test = {0.4, 0.85, 0.97, 100};
  EXPECT_EQ(epoch_metric(r, "ema_test_loss"), 0.4);
  EXPECT_EQ(epoch_metric(r, "ema_test_top5"), 0.97);
  EXPECT_THROW(epoch_metric(r, "train_loss"), Error);
  EXPECT_TRUE(higher_is_better("test_top5"));
  EXPECT_TRUE(higher_is_better("ema_test_top1"));
  EXPECT_FALSE(higher_is_better("ema_test_loss"));
  EXPECT_FALSE(higher_is_better("test_loss"));
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
  e.output = runs.path() / "weights.pt";
  export_checkpoint(e);
  torch::nn::AnyModule from_checkpoint = make_model(request.config, 1), from_export = make_model(request.config, 1);
  load_checkpoint(last, *from_checkpoint.ptr(), nullptr, torch::kCPU);
  models::load_state_dict(*from_export.ptr(), e.output);
  const auto want = from_checkpoint.ptr()->named_parameters(), got = from_export.ptr()->named_parameters();
  ASSERT_EQ(want.size(), got.size());
  for (const auto& item : want) EXPECT_TRUE(torch::equal(item.value(), got[item.key()])) << item.key();
  e.use_ema = true;
  EXPECT_CONTAINS(testing::error_of([&] { export_checkpoint(e); }), "has no EMA weights");
  e.use_ema = false;
  e.format = "torchscript";
  EXPECT_CONTAINS(testing::error_of([&] { export_checkpoint(e); }), "export --format torchscript is not implemented yet");
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
