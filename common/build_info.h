// What this build of Stoker is: its version, the libtorch it was compiled against, whether it has its
// own CUDA parts (and for which GPU architectures), and whether it has the NCCL backend. `trainer
// --version` prints it; the GPU pass (scripts/gpu_pass.sh) checks it against the device it runs on.
#pragma once

#include <string>

namespace stoker {

struct BuildInfo {
  std::string version;               // Stoker's (CMake's project version)
  std::string torch_version;         // the libtorch headers it was compiled against
  bool cuda = false;                 // Stoker's CUDA parts (kernels, CUDA graphs) compiled in
  std::string cuda_compiler;         // nvcc's version, when `cuda`
  std::string cuda_architectures;    // CMAKE_CUDA_ARCHITECTURES, e.g. "80-real;90-real;120"
  bool nccl = false;                 // the NCCL process group backend compiled in
  std::string nccl_version;          // of the nccl.h it was compiled against, when `nccl`
};

BuildInfo build_info();

// Lines of the form "key: value" (trainer --version): stoker, libtorch, cuda parts, nccl.
std::string build_info_text(const BuildInfo& info);

// One line on this machine as libtorch sees it: "machine: N CUDA device(s); cuda:0 NAME (sm XY): the
// kernels run on it" (or why they do not), or "machine: no CUDA device (...)".
std::string machine_text(const BuildInfo& info);

// Whether kernels built for `architectures` (CMAKE_CUDA_ARCHITECTURES, ';' or ',' between: "90-real",
// "120" with PTX, "89-virtual") run on a GPU of compute capability `sm` (major * 10 + minor): machine code for exactly it, or PTX
// for it or an older one (the driver compiles that).
bool kernels_run_on(const std::string& architectures, int sm);

}  // namespace stoker
