# Sanitizer and fuzzing builds: CPU-only, every target instrumented alike.
#
#   -DMEMATTN_SANITIZE="address;undefined"  ASan + UBSan on the library, the tools and the tests;
#                                           any finding aborts (-fno-sanitize-recover=all).
#   -DMEMATTN_FUZZ=ON                       the libFuzzer targets of tests/fuzz (clang only); the
#                                           library gets libFuzzer's coverage instrumentation.
#
# nvcc does not take these flags and device code has no host sanitizer, so both refuse a CUDA
# build (configure with -DMEMATTN_ENABLE_CUDA=OFF).
set(MEMATTN_SANITIZE "" CACHE STRING "Sanitizers for every target, e.g. address;undefined (CPU-only builds)")
option(MEMATTN_FUZZ "Build the libFuzzer targets in tests/fuzz (clang, CPU-only)" OFF)

if(MEMATTN_SANITIZE OR MEMATTN_FUZZ)
  if(MEMATTN_HAS_CUDA)
    message(FATAL_ERROR "memattn: MEMATTN_SANITIZE and MEMATTN_FUZZ need a CPU-only build (-DMEMATTN_ENABLE_CUDA=OFF)")
  endif()
  # Frames and line numbers in every report.
  add_compile_options(-g -fno-omit-frame-pointer)
endif()

if(MEMATTN_SANITIZE)
  string(REPLACE ";" "," _memattn_sanitizers "${MEMATTN_SANITIZE}")
  add_compile_options(-fsanitize=${_memattn_sanitizers} -fno-sanitize-recover=all)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    # The instrumentation keeps clang from vectorising the `omp simd` loops; that is expected
    # here, and the warning would repeat for every such loop.
    add_compile_options(-Wno-pass-failed)
  endif()
  add_link_options(-fsanitize=${_memattn_sanitizers})
  message(STATUS "memattn: sanitizers ${_memattn_sanitizers} on every target")
endif()

if(MEMATTN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "memattn: MEMATTN_FUZZ needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}; "
                        "configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(NOT MEMATTN_SANITIZE)
    message(FATAL_ERROR "memattn: MEMATTN_FUZZ without sanitizers finds crashes only; "
                        "add -DMEMATTN_SANITIZE=\"address;undefined\"")
  endif()
  # Coverage counters everywhere (the fuzz targets link libFuzzer itself, tests/fuzz).
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
