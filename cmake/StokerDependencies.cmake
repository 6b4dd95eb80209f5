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
# The GPU architectures Stoker's kernels are built for: Hopper (H100/H200) unless the user says
# otherwise (-DCMAKE_CUDA_ARCHITECTURES="80;90"). Set before find_package(Torch), whose CUDA set-up
# enables the CUDA language and would otherwise fix nvcc's default (sm_75) in the cache.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "GPU architectures for Stoker's CUDA kernels (default 90: H100/H200)")
endif()
find_package(Torch QUIET HINTS ${_stoker_torch_hints})
stoker_require(Torch_FOUND "libtorch (torch==2.11.0)"
  "Run ./stoker.sh build (installs it into ~/.cache/stoker), or point CMake at your own libtorch with -DTorch_DIR=/path/to/libtorch/share/cmake/Torch or -DCMAKE_PREFIX_PATH=/path/to/libtorch.")
message(STATUS "Stoker: libtorch ${Torch_VERSION} from ${Torch_DIR}")

# Torch's compile flags (the C++ ABI setting) travel with an interface target of ours, so that
# every Stoker target and every consumer gets them.
add_library(stoker_torch_flags INTERFACE)
add_library(stoker::torch_flags ALIAS stoker_torch_flags)
separate_arguments(_torch_cxx_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(stoker_torch_flags INTERFACE ${_torch_cxx_flags})
# libtorch.so exports its own, older copy of std::filesystem (remove_all there jumps to null). Load
# libstdc++ first so that the program's std::filesystem calls bind to the real one.
target_link_options(stoker_torch_flags INTERFACE "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")

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
# OpenCV core + imgproc only (Debian ships their CMake config with the whole of libopencv-dev, which
# drags in ~180 MB of codecs and GUI libraries Stoker never uses), so find the two libraries directly.
find_path(STOKER_OPENCV_INCLUDE_DIR opencv2/imgproc.hpp PATH_SUFFIXES opencv4)
find_library(STOKER_OPENCV_CORE_LIBRARY opencv_core)
find_library(STOKER_OPENCV_IMGPROC_LIBRARY opencv_imgproc)
set(_opencv_found OFF)
if(STOKER_OPENCV_INCLUDE_DIR AND STOKER_OPENCV_CORE_LIBRARY AND STOKER_OPENCV_IMGPROC_LIBRARY)
  set(_opencv_found ON)
endif()
stoker_require(_opencv_found "OpenCV core and imgproc" "${_apt} libopencv-core-dev libopencv-imgproc-dev")
foreach(_part core imgproc)
  string(TOUPPER ${_part} _PART)
  add_library(stoker::opencv_${_part} UNKNOWN IMPORTED)
  set_target_properties(stoker::opencv_${_part} PROPERTIES
    IMPORTED_LOCATION "${STOKER_OPENCV_${_PART}_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${STOKER_OPENCV_INCLUDE_DIR}")
endforeach()
if(STOKER_BUILD_TESTS)
  find_package(GTest QUIET)
  stoker_require(GTest_FOUND "GoogleTest (or configure with -DSTOKER_BUILD_TESTS=OFF)" "${_apt} libgtest-dev")
endif()

# ---- keep fmt and spdlog paired -----------------------------------------------------------------
# libtorch ships fmt 12 headers in its include folder, which comes first on the search path, while
# Debian's spdlog 1.10 is built against the system fmt 9. A folder of links to the system fmt and
# spdlog headers, added with -I (searched before libtorch's -isystem folders), keeps each library
# with the headers it was built for. torch/torch.h itself includes no fmt header.
get_target_property(_fmt_include fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
find_path(STOKER_FMT_INCLUDE_DIR fmt/format.h HINTS ${_fmt_include} NO_CMAKE_PATH NO_CMAKE_ENVIRONMENT_PATH)
find_path(STOKER_SPDLOG_INCLUDE_DIR spdlog/spdlog.h NO_CMAKE_PATH NO_CMAKE_ENVIRONMENT_PATH)
set(_shim "${CMAKE_BINARY_DIR}/stoker-include-shim")
file(MAKE_DIRECTORY "${_shim}")
file(CREATE_LINK "${STOKER_FMT_INCLUDE_DIR}/fmt" "${_shim}/fmt" SYMBOLIC)
file(CREATE_LINK "${STOKER_SPDLOG_INCLUDE_DIR}/spdlog" "${_shim}/spdlog" SYMBOLIC)
target_include_directories(stoker_torch_flags INTERFACE "$<BUILD_INTERFACE:${_shim}>")
