# Installs the library, its headers and a CMake package, so that consumers can write
#   find_package(memattn REQUIRED)
#   target_link_libraries(app PRIVATE memattn::memattn)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS memattn EXPORT memattnTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/memattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET memattn_cli)
  install(TARGETS memattn_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

set(_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/memattn)
install(EXPORT memattnTargets NAMESPACE memattn:: DESTINATION ${_cmake_dir})
configure_package_config_file(cmake/memattnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/memattnConfig.cmake INSTALL_DESTINATION ${_cmake_dir})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/memattnConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/memattnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/memattnConfigVersion.cmake
  DESTINATION ${_cmake_dir})
