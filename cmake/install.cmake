# The embedding API and the installed package: compiles api/ into onnx_mirror, then installs
# the library, the public headers (include/onnx_mirror/, standard library only) and a CMake
# package, so another project does find_package(onnx_mirror) and links onnx_mirror::onnx_mirror.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

add_subdirectory(${PROJECT_SOURCE_DIR}/api ${PROJECT_BINARY_DIR}/api)

# Note [Installed interface]: onnx_mirror links its OBJECT libraries PUBLIC, so in the build
# tree tools and tests get the source-tree include path and every dependency (DNNL, gloo,
# ONNX, CUDA) through it. None of that may reach an installed consumer: the public headers
# include only the standard library. Everything linked so far stays for the build tree only;
# installed consumers see just the include folder and C++17. Dependencies resolve at run
# time through the library's RUNPATH (directories of what it linked that are not system ones).
get_target_property(_omt_interface onnx_mirror INTERFACE_LINK_LIBRARIES)
if(_omt_interface)
  list(TRANSFORM _omt_interface PREPEND "$<BUILD_INTERFACE:")
  list(TRANSFORM _omt_interface APPEND ">")
  set_property(TARGET onnx_mirror PROPERTY INTERFACE_LINK_LIBRARIES ${_omt_interface})
endif()
target_link_libraries(onnx_mirror PRIVATE omt_api)
set_property(TARGET onnx_mirror APPEND PROPERTY INTERFACE_LINK_LIBRARIES $<BUILD_INTERFACE:omt_api>)
target_include_directories(onnx_mirror INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(onnx_mirror INTERFACE cxx_std_17)
set_target_properties(onnx_mirror PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

install(TARGETS onnx_mirror EXPORT onnx_mirrorTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/onnx_mirror
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(EXPORT onnx_mirrorTargets NAMESPACE onnx_mirror::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/onnx_mirror)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/onnx_mirrorConfig.cmake.in
  ${PROJECT_BINARY_DIR}/onnx_mirrorConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/onnx_mirror)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/onnx_mirrorConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/onnx_mirrorConfig.cmake
              ${PROJECT_BINARY_DIR}/onnx_mirrorConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/onnx_mirror)
