# The Python module's side of the configuration (python/CMakeLists.txt builds it).
#
# stoker_python_find_torch(): under a PEP 517 build (scikit-build-core sets SKBUILD and
# Python_EXECUTABLE), the torch of the interpreter pip runs is the libtorch to build against: its
# CMake prefix goes first in CMAKE_PREFIX_PATH. Called before StokerDependencies finds Torch.
#
# stoker_python_decide(): after Torch is found. STOKER_PYTHON builds the module (possible when the libtorch
# found is a Python torch's, site-packages/torch/..., and that Python has its development headers; ON
# by default then, so `./stoker.sh test` builds and tests it; -DSTOKER_PYTHON=OFF leaves it out). It
# then also makes every object position-independent (-fPIC), since the static layer libraries are
# linked into a shared module (thread-locals and globals need -fPIC; on x86-64 its cost is a few
# indirect accesses to globals, not measured separately yet). Sets
# STOKER_TORCH_PY_VERSION (torch.__version__, checked by `import stoker`) and STOKER_TORCH_PYTHON_LIB
# (libtorch_python, where torch's own tensor caster lives).

function(stoker_python_find_torch)
  if(NOT SKBUILD)
    return()
  endif()
  execute_process(COMMAND "${Python_EXECUTABLE}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE failed ERROR_QUIET)
  if(failed)
    message(FATAL_ERROR "Stoker's Python module builds against the torch installed in the environment, but "
      "${Python_EXECUTABLE} cannot import torch. Install torch==2.11.0 first, then build without build "
      "isolation (which would hide it): pip install --no-build-isolation .")
  endif()
  set(CMAKE_PREFIX_PATH "${prefix};${CMAKE_PREFIX_PATH}" PARENT_SCOPE)
  # The project's compiler cache, as ./stoker.sh uses it: the wheel's build folder (build/pip-<tag>, as
  # deep as build/release) then reuses the objects of an earlier build of the same sources.
  find_program(_stoker_ccache ccache)
  if(_stoker_ccache AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
    set(cache "$ENV{STOKER_CACHE}")
    if(NOT cache)
      set(cache "$ENV{HOME}/.cache/stoker")
    endif()
    set(launcher "${CMAKE_COMMAND}" -E env "CCACHE_DIR=${cache}/ccache" "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}"
      CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
      "${_stoker_ccache}")
    set(CMAKE_CXX_COMPILER_LAUNCHER "${launcher}" PARENT_SCOPE)
    set(CMAKE_CUDA_COMPILER_LAUNCHER "${launcher}" PARENT_SCOPE)
  endif()
endfunction()

# A macro, so that FindPython's variables (used by Python_add_library) stay at the top level.
macro(stoker_python_decide)
  set(_stoker_py_eligible OFF)
  set(_stoker_py_why "libtorch at ${Torch_DIR} is not a Python torch's (site-packages/torch)")
  if(Torch_DIR MATCHES "^(.*)/site-packages/torch/share/cmake/Torch$")
    get_filename_component(_stoker_py_env "${CMAKE_MATCH_1}/../.." ABSOLUTE)  # <env>/lib/pythonX.Y/site-packages
    # That environment's interpreter (torch's CUDA set-up may have found another one first); under
    # pip, the one pip runs.
    if(NOT SKBUILD AND EXISTS "${_stoker_py_env}/bin/python3")
      set(Python_EXECUTABLE "${_stoker_py_env}/bin/python3")
    endif()
    find_package(Python 3 QUIET COMPONENTS Interpreter Development.Module)
    if(Python_FOUND)
      set(_stoker_py_eligible ON)
      set(_stoker_py_why "STOKER_PYTHON=OFF in ${CMAKE_BINARY_DIR}/CMakeCache.txt; -DSTOKER_PYTHON=ON builds it")
    else()
      set(_stoker_py_why "no Python development headers for ${Python_EXECUTABLE} (Debian: python3-dev)")
    endif()
  endif()
  option(STOKER_PYTHON "Build the Python module stoker._C (python/)" ${_stoker_py_eligible})
  if(STOKER_PYTHON AND NOT _stoker_py_eligible)
    message(FATAL_ERROR "STOKER_PYTHON: ${_stoker_py_why}")
  elseif(STOKER_PYTHON)
    # -fPIC on every object, programs' and tests' too (not CMAKE_POSITION_INDEPENDENT_CODE, which gives
    # programs -fPIE): they reuse the library's precompiled header, which needs the same flags.
    add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fPIC>" "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fPIC>")
    execute_process(COMMAND "${Python_EXECUTABLE}" -c "import torch; print(torch.__version__)"
      OUTPUT_VARIABLE STOKER_TORCH_PY_VERSION OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _stoker_py_failed
      ERROR_QUIET)
    find_library(STOKER_TORCH_PYTHON_LIB torch_python PATHS "${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH)
    if(_stoker_py_failed OR NOT STOKER_TORCH_PYTHON_LIB)
      message(FATAL_ERROR "STOKER_PYTHON: ${Python_EXECUTABLE} cannot import the torch of ${Torch_DIR} (or its "
        "libtorch_python is missing); build against the torch that Python has, or set -DSTOKER_PYTHON=OFF")
    endif()
    message(STATUS "Stoker: Python module for ${Python_EXECUTABLE} (Python ${Python_VERSION}, torch "
      "${STOKER_TORCH_PY_VERSION})")
  else()
    message(STATUS "Stoker: Python module off (${_stoker_py_why})")
  endif()
endmacro()
