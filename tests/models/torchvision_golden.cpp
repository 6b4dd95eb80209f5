// Shared by the torchvision-compatible families' tests (tests/models/torchvision_golden.h).
#include "models/torchvision_golden.h"

#include <cmath>
#include <sstream>

#include "models/flops.h"
#include "models/registry.h"
#include "models/weights/state_dict.h"
#include "recipe/config.h"

namespace stoker::models::testing {
namespace fs = std::filesystem;

namespace {
constexpr int64_t kGoldenPrime = 16777213;

int64_t golden_name_key(const std::string& name) {
  int64_t k = 0;
  for (unsigned char ch : name) k = (k * 131 + ch) % kGoldenPrime;
  return k;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

torch::Tensor golden_unit(int64_t n, const std::string& name) {
  const torch::Tensor i = torch::arange(n, torch::kInt64);
  const torch::Tensor h = (i + golden_name_key(name)).remainder(kGoldenPrime);
  const torch::Tensor t = (h * h).remainder(kGoldenPrime);
  const torch::Tensor v = (t * 4194301 + h * 1234567 + 7654321).remainder(kGoldenPrime);
  return (2 * v + 1).to(torch::kFloat64) / static_cast<double>(kGoldenPrime) - 1.0;
}

torch::Tensor golden_value(const std::string& name, torch::IntArrayRef shape) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const torch::Tensor u = golden_unit(numel, name).reshape(shape);
  torch::Tensor v;
  if (shape.size() == 4) {  // conv weight: variance 2 / fan_in
    v = u * std::sqrt(6.0 / static_cast<double>(shape[1] * shape[2] * shape[3]));
  } else if (shape.size() == 2) {  // fc weight: variance 1 / fan_in
    v = u * std::sqrt(3.0 / static_cast<double>(shape[1]));
  } else if (ends_with(name, "running_var")) {
    v = 1.0 + 0.25 * (u + 1.0);
  } else if (ends_with(name, "running_mean") || ends_with(name, "bias")) {
    v = 0.1 * u;
  } else {  // norm weights, and the other 1- and 3-D entries (class token, position embedding, layer scale)
    v = 1.0 + 0.25 * u;
  }
  return v.to(torch::kFloat32);
}

torch::Tensor golden_batch(const std::vector<int64_t>& shape, const std::string& name) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  return (2.0 * golden_unit(numel, name)).to(torch::kFloat32).reshape(shape);
}

torch::Tensor golden_input(const std::vector<int64_t>& shape) { return golden_batch(shape, "input"); }

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

torch::Tensor read_tensor(const fs::path& path) {
  const std::string bytes = stoker::testing::read_bytes(path);
  c10::IValue value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  EXPECT_TRUE(value.isTensor()) << path << " holds a " << value.tagKind();
  return value.toTensor();
}

void expect_close(const torch::Tensor& actual, const torch::Tensor& expected) {
  ASSERT_EQ(actual.sizes(), expected.sizes());
  const double max_diff = (actual - expected).abs().max().item<double>();
  ::testing::Test::RecordProperty("max_abs_logit_difference", fmt::format("{:.3g}", max_diff));
  EXPECT_TRUE(torch::allclose(actual, expected, 1e-4, 1e-4)) << "max |difference| " << max_diff << "\nactual:\n"
                                                               << actual << "\nexpected:\n"
                                                               << expected;
  // The comparison means something only if the logits are not all alike: their spread ten times the
  // tolerance at least (MobileNetV3's classifier, initialised N(0, 0.01), gives logits of about 0.01).
  EXPECT_GT(expected.std().item<double>(), 1e-3);
}

namespace {
// Every logit within 1e-4 of the largest |logit| (float32 rounding alone differs from a float64
// forward pass by about 1e-6 of it), and the logits differ between classes and samples.
void expect_logits(const torch::Tensor& ours, const std::vector<double>& logits, int64_t classes, const char* mode) {
  const torch::Tensor expected = torch::tensor(logits, torch::kFloat64).reshape({-1, classes});
  ASSERT_EQ(ours.sizes(), expected.sizes()) << mode;
  const double scale = expected.abs().max().item<double>();
  const double max_diff = (ours.to(torch::kFloat64) - expected).abs().max().item<double>();
  ::testing::Test::RecordProperty(std::string(mode) + "_max_abs_logit_difference", fmt::format("{:.3g}", max_diff));
  EXPECT_LE(max_diff, 1e-4 * scale) << mode << " mode; ours:\n" << ours << "\ntorchvision:\n" << expected;
  EXPECT_GT(expected.std().item<double>(), 0.1 * scale) << mode;
  EXPECT_GT((expected[0] - expected[1]).abs().max().item<double>(), 0.1 * scale) << mode;
}
}  // namespace

void expect_matches_family_golden(const golden::FamilyGolden& g) {
  SCOPED_TRACE(g.model);
  const Config config = parse_config("model: " + g.model + "\n", "the golden's model");
  const std::vector<int64_t>& shape = g.input_shape;
  torch::nn::AnyModule model = create_model(config.model, {shape[1], g.num_classes, shape[2], shape[3]});
  EXPECT_EQ(golden_fill(*model.ptr()), g.filled_tensors);
  const torch::Tensor x = golden_input(shape);
  {
    torch::NoGradGuard no_grad;
    model.ptr()->eval();
    expect_logits(model.forward(x), g.eval_logits, g.num_classes, "eval");
    model.ptr()->train();
    expect_logits(model.forward(x), g.train_logits, g.num_classes, "train");
  }
  EXPECT_DOUBLE_EQ(count_forward_flops(model, {shape[1], shape[2], shape[3]}).flops(), g.forward_flops);
}

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

void expect_matches_mobile_golden(const golden::MobileGolden& g) {
  SCOPED_TRACE(g.type);
  const Config config =
      parse_config(fmt::format("model: {{type: {}, dropout: 0, drop_path_rate: 0}}\n", g.type), "the golden's model");
  const std::vector<int64_t>& shape = g.input_shape;
  torch::nn::AnyModule model = create_model(config.model, {shape[1], g.num_classes, shape[2], shape[3]});
  EXPECT_EQ(golden_fill(*model.ptr()), g.filled_tensors);
  EXPECT_DOUBLE_EQ(count_forward_flops(model, {shape[1], shape[2], shape[3]}).flops(), g.forward_flops);
  const torch::Tensor x = golden_input(shape);
  torch::NoGradGuard no_grad;
  model.ptr()->train();
  expect_logits(model.forward(x), g.train_logits, g.num_classes, "train");
  calibrate(model, golden_batch(g.calibration_shape, "calibration"));
  model.ptr()->eval();
  expect_logits(model.forward(x), g.eval_logits, g.num_classes, "eval");
}

void TorchvisionPython::SetUpTestSuite() {
  // Importing torchvision takes seconds: checked once for the suite.
  python_ = stoker::testing::venv_python(&skip_reason_);
  if (python_.empty()) {
    skip_reason_ += ", torchvision with `bash bench/setup.sh`";
  } else if (stoker::testing::shell("'" + python_.string() + "' -c 'import torchvision' >/dev/null 2>&1") != 0) {
    skip_reason_ = "torchvision is not installed in " + python_.string() + "; install it with `bash bench/setup.sh`";
  }
}

void TorchvisionPython::SetUp() {
  if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  script_ = fs::path(stoker::testing::source_dir()) / "tests" / "golden" / script_name_;
  ASSERT_TRUE(fs::exists(script_)) << script_;
}

std::string TorchvisionPython::run(const std::string& arguments) {
  std::string args = arguments;
  if (const auto at = args.find("{dir}"); at != std::string::npos) {
    args.replace(at, 5, "'" + tmp_.path().string() + "'");
  }
  const fs::path out = tmp_ / "script.out", log = tmp_ / "script.log";
  const std::string command = "'" + python_.string() + "' '" + script_.string() + "' " + args + " >'" + out.string() +
                              "' 2>'" + log.string() + "'";
  const int status = stoker::testing::shell(command);
  EXPECT_EQ(status, 0) << command << "\n" << stoker::testing::read_bytes(log);
  const std::string err = stoker::testing::read_bytes(log);
  EXPECT_EQ(err, "") << "the script wrote to stderr (a warning from torch.load?)";
  return stoker::testing::read_bytes(out);
}

void FamilyPython::expect_loads_torchvision_weights(torch::nn::AnyModule& model, const std::string& arch) {
  ASSERT_NO_FATAL_FAILURE(run("make {dir}"));
  weights::load_state_dict(*model.ptr(), tmp_ / fmt::format("torchvision_{}.pt", arch));
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  expect_close(model.forward(read_tensor(tmp_ / fmt::format("input_{}.pt", arch))),
               read_tensor(tmp_ / fmt::format("torchvision_logits_{}.pt", arch)));
}

void FamilyPython::expect_torchvision_loads_ours(torch::nn::AnyModule& model, const std::string& arch) {
  ASSERT_NO_FATAL_FAILURE(run("make {dir}"));  // the input
  golden_fill(*model.ptr());
  weights::save_state_dict(*model.ptr(), tmp_ / fmt::format("stoker_{}.pt", arch));
  ASSERT_NO_FATAL_FAILURE(run("check {dir} " + arch));
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  expect_close(read_tensor(tmp_ / fmt::format("python_logits_{}.pt", arch)),
               model.forward(read_tensor(tmp_ / fmt::format("input_{}.pt", arch))));
}

namespace {
torch::nn::AnyModule ten_classes(const std::string& type) { return create_model(model_options(type), {3, 10}); }
}  // namespace

void MobilePython::expect_loads_torchvision_weights(const std::string& type) {
  ASSERT_NO_FATAL_FAILURE(run("make {dir} " + type));
  torch::nn::AnyModule model = ten_classes(type);
  weights::load_state_dict(*model.ptr(), tmp_ / fmt::format("torchvision_{}.pt", type));
  // The calibrated statistics came across too (one train-mode pass).
  EXPECT_EQ(state_map(*model.ptr()).at("features.0.1.num_batches_tracked").item<int64_t>(), 1);
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  expect_close(model.forward(read_tensor(tmp_ / fmt::format("input_{}.pt", type))),
               read_tensor(tmp_ / fmt::format("torchvision_logits_{}.pt", type)));
}

void MobilePython::expect_torchvision_loads_ours(const std::string& type) {
  ASSERT_NO_FATAL_FAILURE(run("make {dir} " + type));  // the input
  torch::nn::AnyModule model = ten_classes(type);
  golden_fill(*model.ptr());
  calibrate(model, golden_batch({8, 3, 64, 64}, "calibration"));
  weights::save_state_dict(*model.ptr(), tmp_ / fmt::format("stoker_{}.pt", type));
  ASSERT_NO_FATAL_FAILURE(run("check {dir} " + type));
  model.ptr()->eval();
  torch::NoGradGuard no_grad;
  expect_close(read_tensor(tmp_ / fmt::format("python_logits_{}.pt", type)),
               model.forward(read_tensor(tmp_ / fmt::format("input_{}.pt", type))));
}

std::map<std::string, int64_t> TorchvisionPython::counts(const std::string& printed) {
  std::istringstream in(printed);
  std::map<std::string, int64_t> out;
  std::string name;
  int64_t count = 0;
  while (in >> name >> count) out[name] = count;
  return out;
}

}  // namespace stoker::models::testing
