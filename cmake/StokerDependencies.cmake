# Finds Stoker's dependencies and says, for each missing one, how to get it.
# Sets STOKER_WITH_CUDA and prints the CUDA decision with its reason.

function(stoker_require found what how)
  if(NOT ${found})
    message(FATAL_ERROR "Stoker needs ${what}, which was not found.\n  ${how}")
  endif()
endfunction()

# ---- libtorch -------------------------------------------------------------------------------------
# Looked up where the user points (Torch_DIR, CMAKE_PREFIX_PATH), then in the venv that
# scripts/setup.sh makes (~/.cache/stoker/venv-torch-2.11.0 or $STOKER_CACHE).
set(_stoker_cache "$ENV{STOKER_CACHE}")
if(NOT _stoker_cache)
  set(_stoker_cache "$ENV{HOME}/.cache/stoker")
endif()
file(GLOB _stoker_torch_hints
  "${_stoker_cache}/venv-torch-*/lib/python3*/site-packages/torch/share/cmake")
# The GPU architectures Stoker's kernels are built for: by default every architecture the torch
# 2.11 cu130 wheel itself targets (torch.cuda.get_arch_list(): sm_75 sm_80 sm_86 sm_90 sm_100
# sm_120), plus PTX for the newest so that later GPUs JIT-compile it; -DCMAKE_CUDA_ARCHITECTURES=90
# builds for one. A GPU without a kernel image still trains: the launch failure falls back to the
# ATen path with one warning (kernels/preprocess.cpp). Set before find_package(Torch), whose CUDA
# set-up enables the CUDA language and would otherwise fix nvcc's default (sm_75) in the cache.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "75-real;80-real;86-real;90-real;100-real;120" CACHE STRING
      "GPU architectures for Stoker's CUDA kernels (default: those of the torch wheel, PTX for the newest)")
endif()
find_package(Torch QUIET HINTS ${_stoker_torch_hints})
stoker_require(Torch_FOUND "libtorch (torch==2.11.0)"
  "Run ./stoker.sh build (installs it into ~/.cache/stoker), or point CMake at your own libtorch with -DTorch_DIR=/path/to/libtorch/share/cmake/Torch or -DCMAKE_PREFIX_PATH=/path/to/libtorch.")
message(STATUS "Stoker: libtorch ${Torch_VERSION} from ${Torch_DIR}")

# ---- CUDA -------------------------------------------------------------------------------------------
set(_torch_has_cuda OFF)
if(TARGET torch_cuda OR CAFFE2_USE_CUDA)
  set(_torch_has_cuda ON)
endif()
include(CheckLanguage)
check_language(CUDA)
set(STOKER_WITH_CUDA OFF)
if(STOKER_CUDA STREQUAL "OFF")
  set(_why "STOKER_CUDA=OFF")
elseif(NOT _torch_has_cuda)
  set(_why "libtorch was built without CUDA")
elseif(NOT CMAKE_CUDA_COMPILER)
  set(_why "no nvcc found (set CUDACXX or add /usr/local/cuda/bin to PATH)")
else()
  set(STOKER_WITH_CUDA ON)
  set(_why "libtorch has CUDA ${CUDA_VERSION} and nvcc is ${CMAKE_CUDA_COMPILER}")
endif()
if(STOKER_CUDA STREQUAL "ON" AND NOT STOKER_WITH_CUDA)
  message(FATAL_ERROR "STOKER_CUDA=ON but CUDA parts cannot be built: ${_why}")
endif()
if(STOKER_WITH_CUDA)
  message(STATUS "Stoker: CUDA parts ON: ${_why}")
  # Torch's CUDA set-up (Caffe2/public/cuda.cmake) hides CMAKE_CUDA_ARCHITECTURES behind a normal
  # variable set to OFF and appends -gencode flags for its own arch list to CMAKE_CUDA_FLAGS; that
  # list starts at sm_50, which CUDA 13's nvcc no longer accepts. Drop both so that the cache value
  # above decides. (Its warning about CMAKE_CUDA_ARCHITECTURES is expected.)
  unset(CMAKE_CUDA_ARCHITECTURES)
  string(REGEX REPLACE "-gencode[ =]+arch=[^ ]+" "" CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS}")
  enable_language(CUDA)
  # One CUDA runtime in the process: the shared one libtorch links.
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  message(STATUS "Stoker: CUDA kernels for architecture(s) ${CMAKE_CUDA_ARCHITECTURES} (set CMAKE_CUDA_ARCHITECTURES to change)")
else()
  message(STATUS "Stoker: CUDA parts OFF: ${_why}; training runs on the CPU")
endif()

# ---- the rest (Debian packages; scripts/setup.sh installs them) ------------------------------------
set(_apt "Install it with: apt-get install")
find_package(yaml-cpp QUIET)
stoker_require(yaml-cpp_FOUND "yaml-cpp" "${_apt} libyaml-cpp-dev")
find_package(spdlog QUIET)
stoker_require(spdlog_FOUND "spdlog" "${_apt} libspdlog-dev")
find_package(fmt QUIET)
stoker_require(fmt_FOUND "fmt" "${_apt} libfmt-dev")
find_package(ZLIB QUIET)
stoker_require(ZLIB_FOUND "zlib" "${_apt} zlib1g-dev")
find_package(JPEG QUIET)
stoker_require(JPEG_FOUND "libjpeg (libjpeg-turbo)" "${_apt} libjpeg62-turbo-dev")
find_package(PNG QUIET)
stoker_require(PNG_FOUND "libpng" "${_apt} libpng-dev")
# CLI11 (header-only): the `trainer` program's subcommands, flags and help (apps/trainer.cpp).
find_package(CLI11 CONFIG QUIET)
stoker_require(CLI11_FOUND "CLI11 (for the trainer program)" "${_apt} libcli11-dev")
# stoker::torch_flags (torch's flags, libstdc++ first, the fmt/spdlog include shim), stoker::onnx and OpenCV core +
# imgproc: the installed package makes the same targets the same way (cmake/StokerImportedTargets.cmake).
include(StokerImportedTargets)
stoker_make_imported_targets("${CMAKE_BINARY_DIR}/stoker-include-shim" _missing)
if(_missing)
  message(FATAL_ERROR "Stoker needs ${_missing}, which was not found.")
endif()
# The torch wheel ships protobuf headers of another release in its include folder, which comes
# before /usr/include; models/onnx/proto.cpp sees Debian's through this folder (-I, searched first),
# matching the library it links.
set(STOKER_PROTOBUF_SHIM "${CMAKE_BINARY_DIR}/stoker-protobuf-shim")
file(MAKE_DIRECTORY "${STOKER_PROTOBUF_SHIM}")
file(CREATE_LINK "${STOKER_PROTOBUF_INCLUDE_DIR}/google" "${STOKER_PROTOBUF_SHIM}/google" SYMBOLIC)
# nlohmann-json (header-only): every JSON Stoker writes and reads (metrics.jsonl, environment.json,
# doctor.json, the MLflow REST calls). libcurl: the MLflow sink's HTTP client (observe/mlflow.cpp).
find_path(STOKER_NLOHMANN_JSON_INCLUDE_DIR nlohmann/json.hpp)
stoker_require(STOKER_NLOHMANN_JSON_INCLUDE_DIR "nlohmann-json (JSON in and out)" "${_apt} nlohmann-json3-dev")
find_package(CURL QUIET)
stoker_require(CURL_FOUND "libcurl (the MLflow sink's HTTP client)" "${_apt} libcurl4-openssl-dev")
if(STOKER_BUILD_TESTS)
  find_package(GTest QUIET)
  stoker_require(GTest_FOUND "GoogleTest (or configure with -DSTOKER_BUILD_TESTS=OFF)" "${_apt} libgtest-dev")
endif()

# ---- distributed training (distributed/) ---------------------------------------------------------
# distributed/process_group.cpp builds on c10d as torch 2.11 ships it: c10d::Reducer's constructor changes
# between releases (12 arguments in 2.11, 13 on PyTorch's main), so other versions are refused here
# rather than failing to compile. ProcessGroupGloo.hpp includes gloo's headers, which the torch wheel
# lacks: Debian's libgloo-dev has them (headers only; the gloo code is inside libtorch_cpu).
if(Torch_VERSION VERSION_LESS 2.11 OR Torch_VERSION VERSION_GREATER_EQUAL 2.12)
  message(FATAL_ERROR "Stoker's distributed training (distributed/process_group.cpp) is written against "
    "c10d::Reducer of torch 2.11, but libtorch ${Torch_VERSION} was found at ${Torch_DIR}. Use "
    "torch==2.11.0 (./stoker.sh build installs it), or adapt the Reducer constructor call in "
    "distributed/process_group.cpp to this version and widen this check.")
endif()
find_path(STOKER_GLOO_INCLUDE_DIR gloo/config.h)
stoker_require(STOKER_GLOO_INCLUDE_DIR "gloo's headers (for c10d's ProcessGroupGloo)" "${_apt} libgloo-dev")
# NCCL's header comes with the nvidia-nccl wheel that CUDA builds of torch depend on.
set(STOKER_WITH_NCCL OFF)
if(STOKER_WITH_CUDA)
  get_filename_component(_site "${Torch_DIR}/../../../.." ABSOLUTE)  # <site-packages>/torch/share/cmake/Torch
  file(GLOB _nccl_hints "${_site}/nvidia/*/include" "${_site}/nvidia/*/*/include")
  find_path(STOKER_NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints})
  if(STOKER_NCCL_INCLUDE_DIR)
    set(STOKER_WITH_NCCL ON)
    message(STATUS "Stoker: NCCL backend ON: nccl.h in ${STOKER_NCCL_INCLUDE_DIR}")
  else()
    message(STATUS "Stoker: NCCL backend OFF: nccl.h not found (pip install nvidia-nccl-cu13 into the "
      "venv); distributed training on CUDA will refuse to start")
  endif()
endif()
