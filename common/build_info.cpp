#include "common/build_info.h"

#include <sstream>

#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include "common/hardware.h"

#ifdef STOKER_BUILD_NCCL_VERSION
#define STOKER_NCCL_TEXT STOKER_BUILD_NCCL_VERSION
#else
#define STOKER_NCCL_TEXT ""
#endif
#ifndef STOKER_VERSION
#define STOKER_VERSION "unknown"
#endif
#ifndef STOKER_BUILD_CUDA_ARCHITECTURES
#define STOKER_BUILD_CUDA_ARCHITECTURES ""
#endif
#ifndef STOKER_BUILD_CUDA_COMPILER
#define STOKER_BUILD_CUDA_COMPILER ""
#endif

namespace stoker {

BuildInfo build_info() {
  BuildInfo b;
  b.version = STOKER_VERSION;
  b.torch_version = TORCH_VERSION;
#ifdef STOKER_WITH_CUDA
  b.cuda = true;
  b.cuda_compiler = STOKER_BUILD_CUDA_COMPILER;
  b.cuda_architectures = STOKER_BUILD_CUDA_ARCHITECTURES;
#endif
  b.nccl_version = STOKER_NCCL_TEXT;
  b.nccl = !b.nccl_version.empty();
  return b;
}

std::string build_info_text(const BuildInfo& b) {
  std::string text = fmt::format("stoker: {}\nlibtorch: {} (the headers it was compiled against)\n", b.version,
                                 b.torch_version);
  text += b.cuda ? fmt::format("cuda parts: yes (nvcc {}; kernels for {})\n", b.cuda_compiler, b.cuda_architectures)
                 : "cuda parts: no (built with STOKER_CUDA=OFF, or without nvcc or a CUDA libtorch): CPU only\n";
  text += b.nccl ? fmt::format("nccl: yes ({})\n", b.nccl_version) : "nccl: no (no multi-GPU process group)\n";
  return text;
}

bool kernels_run_on(const std::string& architectures, int device) {
  std::string items = architectures;
  for (char& c : items) c = c == ';' ? ',' : c;
  std::stringstream list(items);
  std::string item;
  while (std::getline(list, item, ',')) {
    const size_t dash = item.find('-');
    const std::string number = item.substr(0, dash), kind = dash == std::string::npos ? "" : item.substr(dash + 1);
    int arch = 0;
    try {
      arch = std::stoi(number);
    } catch (const std::exception&) {
      continue;  // "native", "all": not a number we can check
    }
    const bool sass = kind.empty() || kind == "real", ptx = kind.empty() || kind == "virtual";
    if ((sass && arch == device) || (ptx && arch <= device)) return true;
  }
  return false;
}

std::string machine_text(const BuildInfo& b) {
  const size_t devices = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  if (devices == 0) {
    return "machine: no CUDA device (torch::cuda::is_available() is false: no GPU, no driver, or one older than "
           "libtorch's CUDA needs)\n";
  }
  const HardwareFeatures gpu = detect_hardware(c10::Device(c10::DeviceType::CUDA, 0));
  std::string verdict;
  if (!b.cuda) {
    verdict = "this build has no CUDA parts (kernels, CUDA graphs): rebuild with nvcc";
  } else if (kernels_run_on(b.cuda_architectures, gpu.sm)) {
    verdict = "the kernels run on it";
  } else {
    verdict = fmt::format("the kernels were not built for it (CMAKE_CUDA_ARCHITECTURES={}): rebuild with {}-real added",
                          b.cuda_architectures, gpu.sm);
  }
  return fmt::format("machine: {} CUDA device(s); cuda:0 {} (sm {}): {}\n", devices, gpu.name, gpu.sm, verdict);
}

}  // namespace stoker
