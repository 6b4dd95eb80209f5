# The installed package, used as an outside project would use it (CTest: embed_example_installed).
# Run with cmake -P; tests/CMakeLists.txt passes the variables below.
#
#   1. cmake --install <BUILD_DIR> --prefix <WORK_DIR>/prefix, and check the package's files
#   2. <prefix>/bin/trainer --help (the installed program finds libtorch)
#   3. configure apps/embed_example in <WORK_DIR>/build with only find_package(stoker) and
#      CMAKE_PREFIX_PATH="<prefix>;<TORCH_PREFIX>" (ccache as launcher when there is one)
#   4. build it and 5. run it: it trains its own model on its own data and exits 0 when it learned.
# Any failing step stops the test with the step's name, command and exit status.
cmake_minimum_required(VERSION 3.25)

foreach(_var BUILD_DIR SOURCE_DIR WORK_DIR TORCH_PREFIX GENERATOR CXX_COMPILER BUILD_TYPE)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "embed_example_test.cmake needs -D${_var}=...")
  endif()
endforeach()

string(TIMESTAMP _start "%s")
function(step name)
  string(TIMESTAMP _t0 "%s")
  string(REPLACE "\\;" "<semicolon>" _shown "${ARGN}")
  string(REPLACE ";" " " _shown "${_shown}")
  string(REPLACE "<semicolon>" "\\;" _shown "${_shown}")
  message(STATUS "---- ${name}: ${_shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc)
  string(TIMESTAMP _t1 "%s")
  math(EXPR _seconds "${_t1} - ${_t0}")
  if(NOT _rc STREQUAL "0")
    message(FATAL_ERROR "FAILED: ${name} (exit status ${_rc}, after ${_seconds} s)\n  command: ${_shown}")
  endif()
  message(STATUS "---- ${name}: ok (${_seconds} s)")
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(_prefix "${WORK_DIR}/prefix")

# 1. install, and check that the package has what find_package and an #include need.
step("install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${_prefix}")
foreach(_file
    lib/cmake/stoker/stokerConfig.cmake lib/cmake/stoker/stokerConfigVersion.cmake
    lib/cmake/stoker/stokerTargets.cmake lib/cmake/stoker/StokerImportedTargets.cmake
    lib/libstoker_common.a lib/libstoker_data.a lib/libstoker_trainer.a lib/libstoker_doctor.a bin/trainer
    include/stoker/common/error.h include/stoker/common/registry.h include/stoker/data/dataset.h
    include/stoker/models/cifar_resnet.h include/stoker/trainer/trainer.h)
  if(NOT EXISTS "${_prefix}/${_file}")
    message(FATAL_ERROR "FAILED: the install lacks ${_prefix}/${_file}")
  endif()
endforeach()

# 2. the installed program runs (its RPATH finds libtorch).
step("installed trainer --help" "${_prefix}/bin/trainer" --help)

# 3. configure the example as an outside project.
set(_launcher "")
find_program(_ccache ccache)
if(_ccache)
  set(_launcher "-DCMAKE_CXX_COMPILER_LAUNCHER=${_ccache}")
  if(NOT DEFINED ENV{CCACHE_DIR} AND EXISTS "$ENV{HOME}/.cache/stoker/ccache")
    set(ENV{CCACHE_DIR} "$ENV{HOME}/.cache/stoker/ccache")  # the cache ./stoker.sh uses
  endif()
endif()
step("configure apps/embed_example" "${CMAKE_COMMAND}"
  -S "${SOURCE_DIR}/apps/embed_example" -B "${WORK_DIR}/build" -G "${GENERATOR}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
  "-DCMAKE_PREFIX_PATH=${_prefix}\;${TORCH_PREFIX}" ${_launcher})

# 4. build it, 5. run it.
step("build" "${CMAKE_COMMAND}" --build "${WORK_DIR}/build")
step("run embed_example" "${WORK_DIR}/build/embed_example")

string(TIMESTAMP _end "%s")
math(EXPR _total "${_end} - ${_start}")
message(STATUS "embed_example against the installed package: all steps passed in ${_total} s")
