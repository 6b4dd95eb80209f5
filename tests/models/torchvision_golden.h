// What the tests of the torchvision-compatible families (ResNet, ViT, ConvNeXt, EfficientNet,
// MobileNetV3) share: the integer
// formula that fills a model's weights and input by name, as tests/golden/resnet_golden.py does on the
// Python side (so that checked-in logits need no stored weights), state-dict helpers, and a fixture
// for the live comparisons through the libtorch venv's Python (suites named *Python).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "golden/mobile_golden.h"
#include "golden/vit_convnext_golden.h"
#include "test_util.h"

namespace stoker::models::testing {

// Must match PRIME, name_key(), unit(), golden_value() and golden_input() in
// tests/golden/resnet_golden.py: exact int64 arithmetic, then correctly rounded double operations,
// then float32.
torch::Tensor golden_value(const std::string& name, torch::IntArrayRef shape);
torch::Tensor golden_input(const std::vector<int64_t>& shape);
// n values in (-1, 1), float64: the script's unit(n, name_key(name)).
torch::Tensor golden_unit(int64_t n, const std::string& name);
// Fills every floating-point parameter and buffer of `model` by name; returns how many it filled.
int64_t golden_fill(torch::nn::Module& model);

// Every parameter and buffer by its dotted name.
std::map<std::string, torch::Tensor> state_map(torch::nn::Module& model);
int64_t parameter_count(torch::nn::Module& model);
// A tensor saved with torch.save(tensor, file).
torch::Tensor read_tensor(const std::filesystem::path& path);

// `actual` within 1e-4 (relative and absolute) of `expected`, which must vary (else the comparison
// would say nothing); records the largest difference as a test property.
void expect_close(const torch::Tensor& actual, const torch::Tensor& expected);

// Builds golden `g`'s network in Stoker (its `model` YAML, for its input's size), fills it by the
// formula and checks it against torchvision's: the number of entries filled, the logits in eval and in
// train mode (every one within 1e-4 of the largest |logit|) and the forward FLOPs of one sample.
void expect_matches_family_golden(const golden::FamilyGolden& g);

// mobile_golden.py's golden_batch: 2 * golden_unit(numel, name) as float32 of `shape` (golden_input for
// "input").
torch::Tensor golden_batch(const std::vector<int64_t>& shape, const std::string& name);
// mobile_golden.py's calibrate(): the running statistics of every batch norm := `batch`'s (one
// train-mode pass under no_grad with every momentum at 1, then the momenta as they were). The model is
// left in train mode.
void calibrate(torch::nn::AnyModule& model, const torch::Tensor& batch);

// Builds golden `g`'s network (its type without dropout and stochastic depth), fills it by the formula
// and checks it against torchvision's: the entries filled, the forward FLOPs of one sample, the
// train-mode logits, then, after calibrate() on the golden's calibration batch, the eval-mode logits
// (every one within 1e-4 of the largest |logit|).
void expect_matches_mobile_golden(const golden::MobileGolden& g);

// A suite that runs tests/golden/SCRIPT through the venv's Python with torchvision; every test skips,
// saying what is missing and how to get it, without them.
class TorchvisionPython : public ::testing::Test {
 protected:
  explicit TorchvisionPython(std::string script) : script_name_(std::move(script)) {}
  static void SetUpTestSuite();
  void SetUp() override;
  // Runs the script with `arguments` (the temp dir is passed as `{dir}`); fails the test with the
  // script's output if it fails. Returns what it printed.
  std::string run(const std::string& arguments);
  // "NAME NUMBER" lines, as the scripts' `count` mode prints them.
  static std::map<std::string, int64_t> counts(const std::string& printed);

  static inline std::filesystem::path python_;
  static inline std::string skip_reason_;
  stoker::testing::TempDir tmp_;
  std::string script_name_;
  std::filesystem::path script_;
};

// The ViT and ConvNeXt suites (tests/golden/vit_convnext_golden.py; `arch` vit or convnext): weights
// both ways between `model` (the script's small network, built by the test) and torchvision.
class FamilyPython : public TorchvisionPython {
 protected:
  FamilyPython() : TorchvisionPython("vit_convnext_golden.py") {}
  // Loads the script's seeded torchvision weights strict into `model`; its logits must be torchvision's.
  void expect_loads_torchvision_weights(torch::nn::AnyModule& model, const std::string& arch);
  // Fills `model` by the formula (every entry non-trivial: heads, class tokens and layer scales are
  // not, as built), saves it, loads it strict into torchvision; its logits must be ours.
  void expect_torchvision_loads_ours(torch::nn::AnyModule& model, const std::string& arch);
};

// The EfficientNet and MobileNetV3 suites (tests/golden/mobile_golden.py): weights both ways between
// Stoker's `type` (10 classes) and torchvision's, with batch-norm statistics from a calibration batch.
class MobilePython : public TorchvisionPython {
 protected:
  MobilePython() : TorchvisionPython("mobile_golden.py") {}
  // Loads the script's seeded torchvision weights strict; Stoker's eval-mode logits must be torchvision's.
  void expect_loads_torchvision_weights(const std::string& type);
  // Fills Stoker's model by the formula, calibrates it, saves it and loads it strict into
  // torchvision; its logits must be Stoker's.
  void expect_torchvision_loads_ours(const std::string& type);
};

}  // namespace stoker::models::testing
