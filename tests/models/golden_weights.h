// What the tests of torchvision-compatible models share: the integer formula that fills a model's
// state dict and input on both sides (the C++ half of tests/golden/resnet_golden.py's unit(),
// golden_value(), golden_input() and mobile_golden.py's golden_batch(), calibrate()), and the live
// comparisons' runner of the generator scripts in the libtorch venv's Python (the *Python suites).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "golden/mobile_golden.h"
#include "test_util.h"

namespace stoker::testing {

// Every parameter and buffer of `model` by its state-dict name.
std::map<std::string, torch::Tensor> state_map(torch::nn::Module& model);
int64_t parameter_count(torch::nn::Module& model);

// The value the formula gives state-dict entry `name` of `shape` (float32).
torch::Tensor golden_value(const std::string& name, torch::IntArrayRef shape);
// Fills every floating-point parameter and buffer by name; returns how many it filled.
int64_t golden_fill(torch::nn::Module& model);
// A batch in (-2, 2) keyed by `name`; "input" is resnet_golden.py's golden_input.
torch::Tensor golden_batch(const std::vector<int64_t>& shape, const std::string& name = "input");
// The running statistics of every batch norm := `batch`'s (one train-mode pass under no_grad with
// every momentum at 1, then the momenta as they were); leaves the model in train mode.
void calibrate(torch::nn::AnyModule& model, const torch::Tensor& batch);

// A tensor torch.save wrote (a file of one tensor).
torch::Tensor read_tensor(const std::filesystem::path& path);

// Expects every logit of `ours` ([N, classes]) within 1e-4 of the largest |logit| of `expected`
// (row-major, N x classes; float32 rounding alone differs from a float64 forward pass by about 1e-6
// of it), and the expected logits to differ between classes and samples; records the largest
// difference as the test's property `label`_max_abs_logit_difference.
void expect_golden_logits(const torch::Tensor& ours, const std::vector<double>& expected, const std::string& label);

// Builds `g.type` from the model registry without dropout and stochastic depth, fills it by the
// formula and expects torchvision's train-mode logits, then, after calibrate() on the calibration
// batch, its eval-mode logits (tests/golden/mobile_golden.py).
void expect_matches_mobile_golden(const golden::MobileGolden& g);

// Expects `actual` within rtol 1e-4, atol 1e-4 of `expected`, and `expected` not constant.
void expect_close(const torch::Tensor& actual, const torch::Tensor& expected);

// A suite that runs a generator script of tests/golden/ in the libtorch venv's Python: skipped,
// saying what is missing and how to get it, without the venv or torchvision.
class GoldenScriptTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  void SetUp() override;
  // Runs tests/golden/SCRIPT ARGS...; fails the test with the script's output if it fails.
  void run_script(const std::string& script, const std::vector<std::string>& args);
  // The script's output (stdout and stderr) of the last run_script.
  std::string last_output() const;

  // For a model type of tests/golden/mobile_golden.py: torchvision's seeded weights load into
  // Stoker's model (strict) and give torchvision's eval-mode logits; Stoker's weights, saved, load
  // into torchvision (strict, plain torch.load) and give Stoker's logits.
  void expect_loads_torchvision_weights(const std::string& type);
  void expect_torchvision_loads_ours(const std::string& type);
  // torchvision's parameter count of every type mobile_golden.py knows (1000 classes).
  std::map<std::string, int64_t> torchvision_parameter_counts();

  static inline std::filesystem::path python_;
  static inline std::string skip_reason_;
  TempDir tmp_;
};

}  // namespace stoker::testing
