# Finds what memattn builds with: OpenMP, and with the CUDA backend the CUDA toolkit and the
# CUTLASS/CuTe headers (PyPI nvidia-cutlass, or CUTLASS_DIR).

find_package(OpenMP REQUIRED COMPONENTS CXX)

# --- CUDA ------------------------------------------------------------------------------------
set(MEMATTN_HAS_CUDA OFF)
if(NOT MEMATTN_ENABLE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(MEMATTN_HAS_CUDA ON)
  elseif(MEMATTN_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MEMATTN_ENABLE_CUDA=ON but no CUDA compiler was found (put nvcc on PATH or set CMAKE_CUDA_COMPILER)")
  else()
    message(STATUS "memattn: no CUDA compiler found; building the CPU backend only")
  endif()
endif()

if(MEMATTN_HAS_CUDA)
  # Architectures are given per kernel family with explicit -gencode flags (see src/cuda).
  set(CMAKE_CUDA_ARCHITECTURES OFF)
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)

  # CUTLASS / CuTe headers: CUTLASS_DIR (a CUTLASS checkout or the include folder), the fallback
  # folder, or the PyPI package nvidia-cutlass (pip install --no-deps nvidia-cutlass==4.2.0.0).
  set(CUTLASS_DIR "" CACHE PATH "CUTLASS root or include directory (overrides the PyPI package)")
  set(_cutlass_candidates)
  if(CUTLASS_DIR)
    list(APPEND _cutlass_candidates "${CUTLASS_DIR}/include" "${CUTLASS_DIR}")
  endif()
  list(APPEND _cutlass_candidates "${MEMATTN_DEPS_DIR}/cutlass/include")
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c
              "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))"
      OUTPUT_VARIABLE _pypi_cutlass OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_pypi_cutlass)
      list(APPEND _cutlass_candidates "${_pypi_cutlass}")
    endif()
  endif()
  set(MEMATTN_CUTLASS_INCLUDE "")
  foreach(_dir IN LISTS _cutlass_candidates)
    if(EXISTS "${_dir}/cute/tensor.hpp" AND EXISTS "${_dir}/cutlass/cutlass.h")
      set(MEMATTN_CUTLASS_INCLUDE "${_dir}")
      break()
    endif()
  endforeach()
  if(NOT MEMATTN_CUTLASS_INCLUDE)
    message(FATAL_ERROR
      "memattn: CUTLASS/CuTe headers not found. Install them with\n"
      "    python3 -m pip install --no-deps nvidia-cutlass==4.2.0.0\n"
      "or pass -DCUTLASS_DIR=<cutlass checkout>, or configure with -DMEMATTN_ENABLE_CUDA=OFF.\n"
      "Looked in: ${_cutlass_candidates}")
  endif()
  message(STATUS "memattn: CUDA backend on; CUTLASS headers from ${MEMATTN_CUTLASS_INCLUDE}; families ${MEMATTN_CUDA_ARCHS}")
endif()

# --- CLI11 and GoogleTest (Debian packages, or the fallback folder) ---------------------------
if(MEMATTN_BUILD_CLI)
  find_package(CLI11 CONFIG QUIET)
  if(NOT CLI11_FOUND)
    if(EXISTS "${MEMATTN_DEPS_DIR}/CLI11/include/CLI/CLI.hpp")
      add_library(CLI11::CLI11 INTERFACE IMPORTED)
      target_include_directories(CLI11::CLI11 INTERFACE "${MEMATTN_DEPS_DIR}/CLI11/include")
    else()
      message(FATAL_ERROR "memattn: CLI11 not found (apt-get install libcli11-dev, or run scripts/install_deps.sh)")
    endif()
  endif()
endif()

if(MEMATTN_BUILD_TESTS)
  find_package(GTest CONFIG QUIET)
  if(NOT GTest_FOUND)
    set(_gtest_src "")
    foreach(_dir "${MEMATTN_DEPS_DIR}/googletest" "/usr/src/googletest")
      if(EXISTS "${_dir}/CMakeLists.txt")
        set(_gtest_src "${_dir}")
        break()
      endif()
    endforeach()
    if(NOT _gtest_src)
      message(FATAL_ERROR "memattn: GoogleTest not found (apt-get install libgtest-dev, or run scripts/install_deps.sh)")
    endif()
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    add_subdirectory("${_gtest_src}" "${CMAKE_BINARY_DIR}/_deps/googletest" EXCLUDE_FROM_ALL)
    add_library(GTest::gtest ALIAS gtest)
    add_library(GTest::gtest_main ALIAS gtest_main)
  endif()
endif()

# --- CUDA kernel families ------------------------------------------------------------------------
# Each family compiles for its own targets. sm80 (mma.sync) runs on Ampere and, as SASS built for
# sm_90, on Hopper; its PTX lets the driver JIT it for newer GPUs (sm_100, sm_120). sm90 needs
# the arch-specific sm_90a target for wgmma and setmaxnreg.
set(MEMATTN_SM80_SASS "80;90" CACHE STRING "SASS targets for the sm80 family")
option(MEMATTN_SM80_PTX "Embed compute_80 PTX in the sm80 family (the driver JITs it for GPUs newer than the SASS)" ON)

function(memattn_family_options family out_var)
  if(family STREQUAL "80")
    set(opts)
    foreach(sm IN LISTS MEMATTN_SM80_SASS)
      list(APPEND opts "-gencode=arch=compute_80,code=sm_${sm}")
    endforeach()
    if(MEMATTN_SM80_PTX)
      list(APPEND opts "-gencode=arch=compute_80,code=compute_80")
    endif()
  elseif(family STREQUAL "90")
    set(opts "-gencode=arch=compute_90a,code=sm_90a")
  else()
    message(FATAL_ERROR "memattn: unknown kernel family '${family}' in MEMATTN_CUDA_ARCHS (use 80 and/or 90)")
  endif()
  list(APPEND opts --expt-relaxed-constexpr -Xptxas=--warn-on-spills)
  set(${out_var} "${opts}" PARENT_SCOPE)
endfunction()
