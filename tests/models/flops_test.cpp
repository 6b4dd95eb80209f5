// FLOPs of Stoker's ResNets counted from the operators their forward passes run, against hand
// computations and torchvision's figures (EfficientNet's and MobileNetV3's too); the peak table; MFU.
// FlopsPython compares with PyTorch's own counter (torch.utils.flop_counter) on torchvision's resnet18.
#include "models/flops.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/compact_resnet.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "test_util.h"

namespace stoker::models {
namespace {

// MACs of a k x k convolution from c_in to c_out channels with an h x h output.
double conv(double h, double c_in, double c_out, double k) { return h * h * c_out * c_in * k * k; }

TEST(Flops, Resnet18At224MatchesTorchvision) {
  torch::nn::AnyModule model(resnet18(1000, 3));
  const FlopCount count = count_forward_flops(model, {3, 224, 224});
  // torchvision lists 1.81 "GFLOPS" (MACs) for resnet18; by hand, stage by stage:
  const double expected = conv(112, 3, 64, 7) + 4 * conv(56, 64, 64, 3) +
                          conv(28, 64, 128, 3) + 3 * conv(28, 128, 128, 3) + conv(28, 64, 128, 1) +
                          conv(14, 128, 256, 3) + 3 * conv(14, 256, 256, 3) + conv(14, 128, 256, 1) +
                          conv(7, 256, 512, 3) + 3 * conv(7, 512, 512, 3) + conv(7, 256, 512, 1);
  EXPECT_EQ(expected, 1813561344.0);
  EXPECT_EQ(count.conv_macs, expected);
  EXPECT_EQ(count.matmul_macs, 512.0 * 1000);
  EXPECT_EQ(count.convolutions, 20);
  EXPECT_EQ(count.matmuls, 1);
  EXPECT_NEAR(count.macs() / 1e9, 1.81, 0.005);
  EXPECT_EQ(count.flops(), 2 * 1814073344.0);
  EXPECT_EQ(training_flops_per_sample(model, {3, 224, 224}), 3 * 2 * 1814073344.0);
}

TEST(Flops, CompactResnetMatchesAHandCount) {
  torch::nn::AnyModule model = create_model(compact_resnet({16, 32, 128}, {1, 1, 1}), {1, 10});
  model.ptr()->train();
  const auto bn_mean_before = model.ptr()->named_buffers()["features.stem_bn.running_mean"].clone();
  const FlopCount count = count_forward_flops(model, {1, 28, 28});
  const double stem = conv(28, 1, 16, 3);
  const double stage1 = 2 * conv(28, 16, 16, 3);                                            // identity shortcut
  const double stage2 = conv(14, 16, 32, 3) + conv(14, 32, 32, 3) + conv(14, 16, 32, 1);     // stride 2 + projection
  const double stage3 = conv(7, 32, 128, 3) + conv(7, 128, 128, 3) + conv(7, 32, 128, 1);
  EXPECT_EQ(stem + stage1 + stage2 + stage3, 15767808.0);
  EXPECT_EQ(count.conv_macs, 15767808.0);
  EXPECT_EQ(count.matmul_macs, 128.0 * 10);
  EXPECT_EQ(count.convolutions, 9);
  // The count leaves the model as it was: training mode, batch-norm statistics.
  EXPECT_TRUE(model.ptr()->is_training());
  EXPECT_TRUE(torch::equal(model.ptr()->named_buffers()["features.stem_bn.running_mean"], bn_mean_before));
  // Twice the resolution, four times the convolutions' work; the classifier stays.
  EXPECT_EQ(count_forward_flops(model, {1, 56, 56}).conv_macs, 4 * 15767808.0);
}

// torchvision's weights list "_ops" (G multiply-adds, what it calls GFLOPS) at each weights' crop
// size, to three decimals: EfficientNet's and MobileNetV3's depthwise (k x k MACs per output
// element) and squeeze-excitation convolutions (on a 1x1 map) count as theirs.
TEST(Flops, EfficientNetAndMobileNetV3MatchTorchvisionsListedOps) {
  struct Listed {
    const char* type;
    int64_t size;
    double gmacs;
  };
  for (const Listed& l : {Listed{"efficientnet_b0", 224, 0.386}, Listed{"efficientnet_b1", 240, 0.687},
                          Listed{"efficientnet_b2", 288, 1.088}, Listed{"efficientnet_b3", 300, 1.827},
                          Listed{"mobilenet_v3_small", 224, 0.057}, Listed{"mobilenet_v3_large", 224, 0.217}}) {
    torch::nn::AnyModule model = create_model(model_options(l.type), {3, 1000});
    const FlopCount count = count_forward_flops(model, {3, l.size, l.size});
    EXPECT_NEAR(count.macs() / 1e9, l.gmacs, 0.0005) << l.type;
    EXPECT_EQ(count.matmuls, std::string(l.type).rfind("mobilenet", 0) == 0 ? 2 : 1) << l.type;
  }
}

TEST(Flops, PeakTableAndMfu) {
  EXPECT_EQ(gpu_peak_flops("NVIDIA H100 80GB HBM3", MathType::kBf16), 989.4e12);
  EXPECT_EQ(gpu_peak_flops("NVIDIA H100 PCIe", MathType::kBf16), 756e12);
  EXPECT_EQ(gpu_peak_flops("NVIDIA H200", MathType::kTf32), 494.7e12);
  EXPECT_EQ(gpu_peak_flops("NVIDIA A100-SXM4-80GB", MathType::kFp32), 19.5e12);
  EXPECT_EQ(gpu_peak_flops("NVIDIA A10G", MathType::kFp16), 125e12);
  EXPECT_EQ(gpu_peak_flops("NVIDIA L4", MathType::kBf16), 121e12);
  EXPECT_EQ(gpu_peak_flops("NVIDIA L40S", MathType::kBf16), 362.1e12);
  EXPECT_EQ(gpu_peak_flops("NVIDIA GeForce RTX 4090", MathType::kBf16), 165.2e12);
  EXPECT_FALSE(gpu_peak_flops("Some Future GPU", MathType::kBf16).has_value());
  for (const GpuPeak& gpu : peak_flops_table()) {
    EXPECT_GE(gpu.tf32, gpu.fp32) << gpu.name_contains;
    EXPECT_GE(gpu.bf16, gpu.tf32) << gpu.name_contains;
  }
  EXPECT_DOUBLE_EQ(mfu(247.35e12, 989.4e12), 0.25);
  EXPECT_CONTAINS(testing::error_of([] { mfu(1e12, 0); }), "positive peak");
}

TEST(Flops, CpuPeakIsMeasured) {
  std::string source;
  const std::optional<double> peak = device_peak_flops(torch::kCPU, MathType::kFp32, &source);
  ASSERT_TRUE(peak);
  // Between 1 GFLOP/s and 100 TFLOP/s on any CPU this runs on.
  EXPECT_GT(*peak, 1e9);
  EXPECT_LT(*peak, 1e14);
  EXPECT_CONTAINS(source, "measured");
  // bf16 math: the faster of float32 and bfloat16 matmuls, never below the float32 one by more
  // than the run-to-run noise, and the source names both.
  std::string bf16_source;
  const std::optional<double> bf16 = device_peak_flops(torch::kCPU, MathType::kBf16, &bf16_source);
  ASSERT_TRUE(bf16);
  EXPECT_GT(*bf16, 0.5 * *peak);
  EXPECT_CONTAINS(bf16_source, "the faster of float32 and bf16");
}

TEST(FlopsPython, Resnet18MatchesTorchFlopCounter) {
  std::string why;
  const auto python = testing::venv_python(&why);
  if (python.empty()) GTEST_SKIP() << why << ", and torchvision with `bash bench/setup.sh`";
  if (testing::shell("'" + python.string() + "' -c 'import torchvision' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "torchvision is not installed in " << python.string() << "; install it with `bash bench/setup.sh`";
  }
  testing::TempDir dir;
  const auto out = dir / "flops.txt";
  const std::string script =
      "import torch, torchvision\n"
      "from torch.utils.flop_counter import FlopCounterMode\n"
      "m = torchvision.models.resnet18().eval()\n"
      "with FlopCounterMode(display=False) as f, torch.no_grad():\n"
      "    m(torch.zeros(1, 3, 224, 224))\n"
      "print(f.get_total_flops())\n";
  testing::write_bytes(dir / "count.py", script);
  ASSERT_EQ(testing::shell("'" + python.string() + "' '" + (dir / "count.py").string() + "' >'" + out.string() + "' 2>&1"), 0)
      << testing::read_bytes(out);
  torch::nn::AnyModule model(resnet18(1000, 3));
  EXPECT_EQ(std::stod(testing::read_bytes(out)), count_forward_flops(model, {3, 224, 224}).flops());
}

}  // namespace
}  // namespace stoker::models
