// The golden weight formula and the generator-script runner (golden_weights.h).
#include "golden_weights.h"

#include <cmath>
#include <fstream>

#include "models/registry.h"
#include "models/state_dict.h"
#include "recipe/config.h"

namespace stoker::testing {
namespace fs = std::filesystem;

std::map<std::string, torch::Tensor> state_map(torch::nn::Module& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model.named_parameters()) out[p.key()] = p.value();
  for (const auto& b : model.named_buffers()) out[b.key()] = b.value();
  return out;
}

int64_t parameter_count(torch::nn::Module& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

namespace {

// Must match PRIME, name_key() and unit() in tests/golden/resnet_golden.py: exact int64 arithmetic
// (no product reaches 2^63), then correctly rounded double operations, then float32.
constexpr int64_t kGoldenPrime = 16777213;

int64_t golden_name_key(const std::string& name) {
  int64_t k = 0;
  for (unsigned char ch : name) k = (k * 131 + ch) % kGoldenPrime;
  return k;
}

torch::Tensor golden_unit(int64_t n, int64_t key) {
  const torch::Tensor i = torch::arange(n, torch::kInt64);
  const torch::Tensor h = (i + key).remainder(kGoldenPrime);
  const torch::Tensor t = (h * h).remainder(kGoldenPrime);
  const torch::Tensor v = (t * 4194301 + h * 1234567 + 7654321).remainder(kGoldenPrime);
  return (2 * v + 1).to(torch::kFloat64) / static_cast<double>(kGoldenPrime) - 1.0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

// Must match golden_value() in tests/golden/resnet_golden.py.
torch::Tensor golden_value(const std::string& name, torch::IntArrayRef shape) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const torch::Tensor u = golden_unit(numel, golden_name_key(name)).reshape(shape);
  torch::Tensor v;
  if (shape.size() == 4) {  // conv weight: variance 2 / fan_in
    v = u * std::sqrt(6.0 / static_cast<double>(shape[1] * shape[2] * shape[3]));
  } else if (shape.size() == 2) {  // fc weight: variance 1 / fan_in
    v = u * std::sqrt(3.0 / static_cast<double>(shape[1]));
  } else if (ends_with(name, "running_var")) {
    v = 1.0 + 0.25 * (u + 1.0);
  } else if (ends_with(name, "running_mean") || ends_with(name, "bias")) {
    v = 0.1 * u;
  } else {  // BN weight
    v = 1.0 + 0.25 * u;
  }
  return v.to(torch::kFloat32);
}

int64_t golden_fill(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  int64_t filled = 0;
  for (auto& [name, tensor] : state_map(model)) {
    if (!tensor.is_floating_point()) continue;
    tensor.copy_(golden_value(name, tensor.sizes()));
    ++filled;
  }
  return filled;
}

// Must match golden_input() in resnet_golden.py and golden_batch() in mobile_golden.py.
torch::Tensor golden_batch(const std::vector<int64_t>& shape, const std::string& name) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  return (2.0 * golden_unit(numel, golden_name_key(name))).to(torch::kFloat32).reshape(shape);
}

// Must match calibrate() in mobile_golden.py.
void calibrate(torch::nn::AnyModule& model, const torch::Tensor& batch) {
  std::vector<std::pair<torch::nn::BatchNorm2dImpl*, std::optional<double>>> norms;
  for (const auto& m : model.ptr()->modules(/*include_self=*/false)) {
    if (auto* bn = m->as<torch::nn::BatchNorm2d>()) norms.emplace_back(bn, bn->options.momentum());
  }
  for (auto& [bn, momentum] : norms) bn->options.momentum(1.0);
  model.ptr()->train();
  {
    torch::NoGradGuard no_grad;
    model.forward(batch);
  }
  for (auto& [bn, momentum] : norms) bn->options.momentum(momentum);
}

torch::Tensor read_tensor(const fs::path& path) {
  const std::string bytes = read_bytes(path);
  c10::IValue value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  EXPECT_TRUE(value.isTensor()) << path << " holds a " << value.tagKind();
  return value.toTensor();
}

void expect_golden_logits(const torch::Tensor& ours_any, const std::vector<double>& logits, const std::string& label) {
  const torch::Tensor ours = ours_any.to(torch::kFloat64);
  ASSERT_EQ(ours.dim(), 2);
  const torch::Tensor expected = torch::tensor(logits, torch::kFloat64).reshape({-1, ours.size(1)});
  ASSERT_EQ(ours.sizes(), expected.sizes());
  const double scale = expected.abs().max().item<double>();
  const double max_diff = (ours - expected).abs().max().item<double>();
  ::testing::Test::RecordProperty(label + "_max_abs_logit_difference", fmt::format("{:.3g}", max_diff));
  EXPECT_LE(max_diff, 1e-4 * scale) << "ours:\n" << ours << "\ntorchvision:\n" << expected;
  // The comparison means something only if the logits differ between classes and samples.
  EXPECT_GT(expected.std().item<double>(), 0.1 * scale);
  EXPECT_GT((expected[0] - expected[1]).abs().max().item<double>(), 0.1 * scale);
}

void expect_matches_mobile_golden(const golden::MobileGolden& g) {
  SCOPED_TRACE(g.type);
  const Config config =
      parse_config(fmt::format("model: {{type: {}, dropout: 0, drop_path_rate: 0}}\n", g.type), "golden.yaml");
  torch::nn::AnyModule model = models::create_model(config.model, {g.input_shape[1], g.num_classes});
  // The same set of entries as torchvision's state dict (each entry's values depend on its name).
  EXPECT_EQ(golden_fill(*model.ptr()), g.filled_tensors);
  torch::NoGradGuard no_grad;
  model.ptr()->train();
  expect_golden_logits(model.forward(golden_batch(g.input_shape)), g.train_logits, g.type + "_train");
  calibrate(model, golden_batch(g.calibration_shape, "calibration"));
  model.ptr()->eval();
  expect_golden_logits(model.forward(golden_batch(g.input_shape)), g.eval_logits, g.type + "_eval");
}

void expect_close(const torch::Tensor& actual, const torch::Tensor& expected) {
  ASSERT_EQ(actual.sizes(), expected.sizes());
  const double max_diff = (actual - expected).abs().max().item<double>();
  ::testing::Test::RecordProperty("max_abs_logit_difference", fmt::format("{:.3g}", max_diff));
  EXPECT_TRUE(torch::allclose(actual, expected, 1e-4, 1e-4))
      << "max |difference| " << max_diff << "\nactual:\n"
      << actual << "\nexpected:\n"
      << expected;
  // The comparison means something only if the logits are not all alike.
  EXPECT_GT(expected.std().item<double>(), 1e-2);
}

void GoldenScriptTest::SetUpTestSuite() {
  // Importing torchvision takes seconds: once for the suite.
  python_ = venv_python(&skip_reason_);
  if (python_.empty()) {
    skip_reason_ += ", torchvision with `bash bench/setup.sh`";
  } else if (shell("'" + python_.string() + "' -c 'import torchvision' >/dev/null 2>&1") != 0) {
    skip_reason_ = "torchvision is not installed in " + python_.string() + "; install it with `bash bench/setup.sh`";
  }
}

void GoldenScriptTest::SetUp() {
  if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
}

void GoldenScriptTest::run_script(const std::string& script, const std::vector<std::string>& args) {
  const fs::path path = fs::path(STOKER_SOURCE_DIR) / "tests" / "golden" / script;
  ASSERT_TRUE(fs::exists(path)) << path;
  std::string command = "'" + python_.string() + "' '" + path.string() + "'";
  for (const std::string& a : args) command += " '" + a + "'";
  command += " >'" + (tmp_ / "script.log").string() + "' 2>&1";
  ASSERT_EQ(shell(command), 0) << command << "\n" << last_output();
}

std::string GoldenScriptTest::last_output() const { return read_bytes(tmp_ / "script.log"); }

namespace {
torch::nn::AnyModule ten_classes(const std::string& type) {
  return models::create_model(models::model_options(type), {3, 10});
}
}  // namespace

void GoldenScriptTest::expect_loads_torchvision_weights(const std::string& type) {
  ASSERT_NO_FATAL_FAILURE(run_script("mobile_golden.py", {"make", tmp_.path().string(), type}));
  torch::nn::AnyModule model = ten_classes(type);
  models::load_state_dict(*model.ptr(), tmp_ / ("torchvision_" + type + ".pt"));
  // The calibrated statistics came across too (one train-mode pass).
  EXPECT_EQ(state_map(*model.ptr()).at("features.0.1.num_batches_tracked").item<int64_t>(), 1);
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor x = read_tensor(tmp_ / "input.pt");
  ASSERT_EQ(x.sizes(), (std::vector<int64_t>{2, 3, 64, 64}));
  expect_close(model.forward(x), read_tensor(tmp_ / "torchvision_logits.pt"));
}

void GoldenScriptTest::expect_torchvision_loads_ours(const std::string& type) {
  ASSERT_NO_FATAL_FAILURE(run_script("mobile_golden.py", {"make", tmp_.path().string(), type}));  // input.pt
  torch::nn::AnyModule model = ten_classes(type);
  torch::manual_seed(3);
  calibrate(model, torch::randn({8, 3, 64, 64}));  // non-trivial statistics, as on the Python side
  models::save_state_dict(*model.ptr(), tmp_ / ("stoker_" + type + ".pt"));
  ASSERT_NO_FATAL_FAILURE(run_script("mobile_golden.py", {"check", tmp_.path().string(), type}));
  EXPECT_EQ(last_output(), "") << "plain torch.load (weights_only=True) read it, without a warning";
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor ours = model.forward(read_tensor(tmp_ / "input.pt"));
  expect_close(read_tensor(tmp_ / "python_logits.pt"), ours);
}

std::map<std::string, int64_t> GoldenScriptTest::torchvision_parameter_counts() {
  run_script("mobile_golden.py", {"count", tmp_.path().string()});
  std::map<std::string, int64_t> counts;
  std::ifstream in(tmp_ / "parameter_counts.txt");
  std::string type;
  int64_t count = 0;
  while (in >> type >> count) counts[type] = count;
  return counts;
}

}  // namespace stoker::testing
