# Builds memattn._autograd (the project beside this file) into OUTPUT, at build time. Where that
# fails it says so in one line, removes any module an earlier build left there, and succeeds: the
# package then takes its Python autograd Function. Settings (-D, from ../CMakeLists.txt):
# SOURCE_DIR BINARY_DIR OUTPUT GENERATOR MAKE_PROGRAM CXX BUILD_TYPE PYTHON MEMATTN_SOURCE_DIR
# HAS_CUDA CUDA_INCLUDE (folders joined by '|') TORCH_VERSION TORCH_DIR (torch's package folder)
# TORCH_ABI (1: the C++11 std::string ABI).
string(REPLACE "|" ";" CUDA_INCLUDE "${CUDA_INCLUDE}")
set(_settings -G ${GENERATOR} -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM} -DCMAKE_CXX_COMPILER=${CXX}
    -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DPython3_EXECUTABLE=${PYTHON} -DMEMATTN_SOURCE_DIR=${MEMATTN_SOURCE_DIR}
    -DMEMATTN_AUTOGRAD_OUTPUT=${OUTPUT} -DMEMATTN_HAS_CUDA=${HAS_CUDA} "-DCUDAToolkit_INCLUDE_DIRS=${CUDA_INCLUDE}"
    -DMEMATTN_TORCH_DIR=${TORCH_DIR} -DMEMATTN_TORCH_ABI=${TORCH_ABI})
set(_log ${BINARY_DIR}/build.log)
file(MAKE_DIRECTORY ${OUTPUT} ${BINARY_DIR})
file(WRITE ${_log} "")

# Configured again only when a setting or torch changed; the build below tracks the sources.
set(_stamp "${SOURCE_DIR};${_settings};torch ${TORCH_VERSION}")
set(_rc 0)
if(EXISTS ${BINARY_DIR}/settings.txt)
  file(READ ${BINARY_DIR}/settings.txt _old)
endif()
if(NOT EXISTS ${BINARY_DIR}/CMakeCache.txt OR NOT _old STREQUAL _stamp)
  file(REMOVE ${BINARY_DIR}/settings.txt ${BINARY_DIR}/CMakeCache.txt)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BINARY_DIR} ${_settings}
                  OUTPUT_VARIABLE _out ERROR_VARIABLE _out RESULT_VARIABLE _rc)
  file(APPEND ${_log} "${_out}")
  if(_rc EQUAL 0)
    file(WRITE ${BINARY_DIR}/settings.txt "${_stamp}")
  endif()
endif()
# A compile that failed is not tried again (each try costs as much as a build of the module) until
# a source it reads or the settings change.
file(GLOB _sources ${MEMATTN_SOURCE_DIR}/python/memattn_autograd.cpp ${MEMATTN_SOURCE_DIR}/python/*.hpp
     ${MEMATTN_SOURCE_DIR}/include/memattn/*.hpp ${SOURCE_DIR}/CMakeLists.txt)
set(_failed_key "${_stamp}")
foreach(_source IN LISTS _sources)
  file(SHA256 ${_source} _hash)
  string(APPEND _failed_key ";${_hash}")
endforeach()
if(EXISTS ${BINARY_DIR}/failed.txt)
  file(READ ${BINARY_DIR}/failed.txt _failed)
  if(_failed STREQUAL _failed_key)
    file(READ ${BINARY_DIR}/failed.log _out)
    file(APPEND ${_log} "${_out}")
    set(_rc 1)
  endif()
endif()
if(_rc EQUAL 0)
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY_DIR}
                  OUTPUT_VARIABLE _out ERROR_VARIABLE _out RESULT_VARIABLE _rc)
  file(APPEND ${_log} "${_out}")
  file(REMOVE ${BINARY_DIR}/failed.txt)
  if(NOT _rc EQUAL 0)
    file(WRITE ${BINARY_DIR}/failed.txt "${_failed_key}")
    file(COPY_FILE ${_log} ${BINARY_DIR}/failed.log)
  endif()
endif()
if(NOT _rc EQUAL 0)
  file(GLOB _stale ${OUTPUT}/_autograd*)
  if(_stale)
    file(REMOVE ${_stale})
  endif()
  file(READ ${_log} _why)
  if(_why MATCHES "memattn: skipped: ([^\n]*)")
    set(_why "${CMAKE_MATCH_1}")
  else()
    set(_why "see ${_log}")
  endif()
  message(STATUS "memattn: memattn._autograd does not build with torch ${TORCH_VERSION} (${_why}); "
                 "memattn.attention takes its Python autograd Function")
endif()
