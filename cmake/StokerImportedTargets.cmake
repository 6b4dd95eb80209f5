# The imported targets that Stoker's own build (cmake/StokerDependencies.cmake) and its installed
# package (stokerConfig.cmake, which installs this file beside itself) both make from what they find
# on the machine, so that the library and every program built on it, in the tree or outside it,
# compile and link alike:
#
#   stoker::torch_flags        torch's compile flags (TORCH_CXX_FLAGS: the C++ ABI setting),
#                              libstdc++ linked before libtorch, and the fmt/spdlog include shim
#   stoker::opencv_core        the two OpenCV libraries Stoker's data pipeline uses
#   stoker::opencv_imgproc
#   stoker::onnx               ONNX's protobuf classes and checker (Debian's libonnx-dev) and the
#                              protobuf library they are built on: `trainer export --format onnx`
#
# stoker_make_imported_targets(<shim folder> <result variable>): call it after find_package(Torch)
# and find_package(fmt). It sets <result variable> to what it could not find (empty when nothing was
# missing) and makes the targets only when nothing was. Calling it again is harmless.

function(stoker_make_imported_targets shim missing_var)
  set(${missing_var} "" PARENT_SCOPE)

  # ---- OpenCV core + imgproc --------------------------------------------------------------------
  # Debian ships OpenCV's CMake config only with the whole of libopencv-dev (~180 MB of codecs and
  # GUI libraries Stoker never uses), so the two libraries are found directly.
  find_path(STOKER_OPENCV_INCLUDE_DIR opencv2/imgproc.hpp PATH_SUFFIXES opencv4)
  find_library(STOKER_OPENCV_CORE_LIBRARY opencv_core)
  find_library(STOKER_OPENCV_IMGPROC_LIBRARY opencv_imgproc)
  if(NOT (STOKER_OPENCV_INCLUDE_DIR AND STOKER_OPENCV_CORE_LIBRARY AND STOKER_OPENCV_IMGPROC_LIBRARY))
    set(${missing_var} "OpenCV core and imgproc (apt-get install libopencv-core-dev libopencv-imgproc-dev)" PARENT_SCOPE)
    return()
  endif()

  # ---- keep fmt and spdlog paired -------------------------------------------------------------
  # libtorch ships fmt 12 headers in its include folder, which comes first on the search path, while
  # Debian's spdlog 1.10 is built against the system fmt 9. A folder of links to the system fmt and
  # spdlog headers, added with -I (searched before libtorch's -isystem folders), keeps each library
  # with the headers it was built for. torch/torch.h itself includes no fmt header.
  get_target_property(_fmt_include fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  find_path(STOKER_FMT_INCLUDE_DIR fmt/format.h HINTS ${_fmt_include} NO_CMAKE_PATH NO_CMAKE_ENVIRONMENT_PATH)
  find_path(STOKER_SPDLOG_INCLUDE_DIR spdlog/spdlog.h NO_CMAKE_PATH NO_CMAKE_ENVIRONMENT_PATH)
  if(NOT (STOKER_FMT_INCLUDE_DIR AND STOKER_SPDLOG_INCLUDE_DIR))
    set(${missing_var} "the fmt and spdlog headers (apt-get install libfmt-dev libspdlog-dev)" PARENT_SCOPE)
    return()
  endif()
  # ---- ONNX and protobuf, found directly --------------------------------------------------------
  # libtorch's CMake config defines protobuf::libprotobuf as an empty stand-in (its own protobuf is
  # hidden inside libtorch_cpu), which ONNX's CMake config would then link instead of the library.
  find_path(STOKER_ONNX_INCLUDE_DIR onnx/onnx_pb.h NO_CMAKE_PATH NO_CMAKE_ENVIRONMENT_PATH)
  find_library(STOKER_ONNX_LIBRARY onnx)
  find_library(STOKER_ONNX_PROTO_LIBRARY onnx_proto)
  find_path(STOKER_PROTOBUF_INCLUDE_DIR google/protobuf/message.h NO_CMAKE_PATH NO_CMAKE_ENVIRONMENT_PATH)
  find_library(STOKER_PROTOBUF_LIBRARY protobuf)
  if(NOT (STOKER_ONNX_INCLUDE_DIR AND STOKER_ONNX_LIBRARY AND STOKER_ONNX_PROTO_LIBRARY))
    set(${missing_var} "ONNX's C++ library, for ONNX export (apt-get install libonnx-dev)" PARENT_SCOPE)
    return()
  endif()
  if(NOT (STOKER_PROTOBUF_INCLUDE_DIR AND STOKER_PROTOBUF_LIBRARY))
    set(${missing_var} "protobuf's C++ library, for ONNX export (apt-get install libprotobuf-dev)" PARENT_SCOPE)
    return()
  endif()

  file(MAKE_DIRECTORY "${shim}")
  file(CREATE_LINK "${STOKER_FMT_INCLUDE_DIR}/fmt" "${shim}/fmt" SYMBOLIC)
  file(CREATE_LINK "${STOKER_SPDLOG_INCLUDE_DIR}/spdlog" "${shim}/spdlog" SYMBOLIC)

  if(TARGET stoker::torch_flags)
    return()
  endif()
  foreach(_part core imgproc)
    string(TOUPPER ${_part} _PART)
    add_library(stoker::opencv_${_part} UNKNOWN IMPORTED)
    set_target_properties(stoker::opencv_${_part} PROPERTIES
      IMPORTED_LOCATION "${STOKER_OPENCV_${_PART}_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${STOKER_OPENCV_INCLUDE_DIR}")
  endforeach()

  add_library(stoker::onnx INTERFACE IMPORTED)
  set_target_properties(stoker::onnx PROPERTIES INTERFACE_LINK_LIBRARIES
    "${STOKER_ONNX_LIBRARY};${STOKER_ONNX_PROTO_LIBRARY};${STOKER_PROTOBUF_LIBRARY}")

  add_library(stoker::torch_flags INTERFACE IMPORTED)
  separate_arguments(_torch_cxx_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  set_target_properties(stoker::torch_flags PROPERTIES
    INTERFACE_COMPILE_OPTIONS "${_torch_cxx_flags}"
    # libtorch.so exports its own, older copy of std::filesystem (remove_all there jumps to null).
    # Load libstdc++ first so that the program's std::filesystem calls bind to the real one.
    INTERFACE_LINK_OPTIONS "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state"
    INTERFACE_INCLUDE_DIRECTORIES "${shim}"
    # -I, not -isystem: the shim must come before libtorch's folders.
    SYSTEM FALSE)
endfunction()
