// Hardware detection (common/hardware.h): each capability answer forced through cpu_features and
// cuda_features with the flags of real CPUs and GPUs; the memory readings on this machine.
#include "common/hardware.h"

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "test_util.h"

namespace stoker {
namespace {

// cpuinfo's flags (at::cpu::get_cpu_capabilities) of three CPUs.
std::map<std::string, bool> avx2_only() {  // issue 19's AMD EPYC (family 25): AVX2, FMA, F16C
  return {{"avx2", true}, {"fma3", true}, {"f16c", true}, {"avx512_f", false}, {"avx512_bf16", false}};
}
std::map<std::string, bool> avx512_bf16() {  // an Intel Xeon with AVX512_BF16
  return {{"avx2", true},     {"fma3", true},        {"avx512_f", true}, {"avx512_bw", true},
          {"avx512_vl", true}, {"avx512_dq", true},  {"avx512_bf16", true}, {"avx_vnni", true}};
}
std::map<std::string, bool> avx512_plain() {  // Skylake-SP: an AVX-512 core without bf16 dot products
  return {{"avx2", true}, {"fma3", true}, {"avx512_f", true}, {"avx512_bw", true}, {"avx512_vl", true},
          {"avx512_dq", true}};
}

TEST(Hardware, CpuFeaturesFromCpuinfoFlags) {
  const HardwareFeatures epyc = cpu_features(avx2_only(), "AMD EPYC", "");
  EXPECT_FALSE(epyc.onednn_bf16);
  EXPECT_FALSE(epyc.native_bf16);
  EXPECT_CONTAINS(epyc.summary(), "AMD EPYC: AVX2 FMA (no AVX-512, AVX512_BF16");
  const HardwareFeatures xeon = cpu_features(avx512_bf16(), "Intel Xeon", "");
  EXPECT_TRUE(xeon.onednn_bf16);
  EXPECT_TRUE(xeon.native_bf16);
  EXPECT_CONTAINS(xeon.summary(), "oneDNN runs bf16 natively");
  const HardwareFeatures skylake = cpu_features(avx512_plain(), "Intel Xeon Gold 6148", "");
  EXPECT_TRUE(skylake.onednn_bf16);
  EXPECT_FALSE(skylake.native_bf16);
  EXPECT_CONTAINS(skylake.summary(), "oneDNN emulates bf16");
}

TEST(Hardware, OneDnnIsaCapIsHonoured) {
  // ONEDNN_MAX_CPU_ISA=AVX2 on an AVX512_BF16 Xeon reproduces issue 19's CPU: ATen then runs bf16
  // convolutions in its reference code (measured: bf16-mixed 5x slower than fp32 there).
  HardwareFeatures hw = cpu_features(avx512_bf16(), "Intel Xeon", "AVX2");
  EXPECT_FALSE(hw.onednn_bf16);
  EXPECT_CONTAINS(hw.summary(), "ONEDNN_MAX_CPU_ISA=AVX2");
  hw = cpu_features(avx512_bf16(), "Intel Xeon", "avx512_core");  // oneDNN accepts either case
  EXPECT_TRUE(hw.onednn_bf16);
  EXPECT_FALSE(hw.native_bf16);
  hw = cpu_features(avx512_bf16(), "Intel Xeon", "ALL");
  EXPECT_TRUE(hw.native_bf16);
  // AVX2-VNNI-2 CPUs (AVX-NE-CONVERT) have oneDNN's bf16 path without AVX-512.
  std::map<std::string, bool> vnni2 = avx2_only();
  vnni2["avx_vnni"] = vnni2["avx_vnni_int8"] = vnni2["avx_ne_convert"] = true;
  EXPECT_TRUE(cpu_features(vnni2, "Intel Xeon 6700E", "").native_bf16);
}

TEST(Hardware, CudaFeaturesByComputeCapability) {
  EXPECT_TRUE(cuda_features("NVIDIA H100 80GB HBM3", 90).native_bf16);
  EXPECT_FALSE(cuda_features("Tesla T4", 75).native_bf16);
  EXPECT_CONTAINS(cuda_features("NVIDIA H100 80GB HBM3", 90).summary(), "(sm_90): bf16 tensor cores");
  EXPECT_CONTAINS(cuda_features("Tesla T4", 75).summary(), "fp16 tensor cores, no bf16 ones");
}

// The process's resident set rises by what it touches, and its peak is kept until reset.
TEST(Hardware, CpuMemoryReadingsFollowAnAllocation) {
  const torch::Device cpu = torch::kCPU;
  EXPECT_GT(available_memory_bytes(cpu), 0);
  reset_peak_memory(cpu);
  const double before = memory_in_use_bytes(cpu);
  EXPECT_GT(before, 0);
  {
    torch::Tensor big = torch::ones({64, 1024, 1024});  // 256 MB, touched
    EXPECT_GT(memory_in_use_bytes(cpu), before + 200e6);
  }
  EXPECT_GT(peak_memory_bytes(cpu), before + 200e6);
  EXPECT_LT(memory_in_use_bytes(cpu), before + 100e6);  // freed: the peak stays, the use does not
}

TEST(Hardware, OutOfMemoryIsRecognisedByItsSigns) {
  EXPECT_TRUE(is_out_of_memory(std::runtime_error("CUDA out of memory. Tried to allocate 2.00 GiB")));
  EXPECT_TRUE(is_out_of_memory(std::runtime_error("cuDNN error: CUDNN_STATUS_ALLOC_FAILED")));
  EXPECT_FALSE(is_out_of_memory(std::runtime_error("shape mismatch")));
}

}  // namespace
}  // namespace stoker
