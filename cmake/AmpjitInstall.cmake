# `cmake --install build --prefix P` lays out what a program outside this tree
# needs to use ampjit:
#   P/lib/libampjit.so                the public API (frontend/CMakeLists.txt)
#   P/include/jit/*.h                 the C++ API's headers
#   P/include/ampjit/{runtime,Codegen}  the runtime's and codegen::compileModule's
#   P/include/ampjit-c/Ampjit.h       the C API (capi/)
#   P/lib/python3/site-packages/ampjit  the Python package over the C API (python/)
#   P/lib/cmake/ampjit/               find_package(ampjit) -> ampjit::ampjit
#   P/bin/amp-opt, ampjit-run, ampjit-train               the tools
# tests/check_install_consumer.sh installs into a temporary prefix and builds
# examples/consumer against it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Installed files keep the run paths of libraries outside the tree (the CUDA
# toolkit's NVRTC, cuBLASLt and cuDNN), as the build tree's do. The targets
# exist already, so the property is set on each, not through its CMAKE_ default.
set(AMPJIT_INSTALLED_TOOLS amp-opt ampjit-run ampjit-train)
set_target_properties(ampjit ${AMPJIT_INSTALLED_TOOLS} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

install(TARGETS ampjit EXPORT ampjitTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${AMPJIT_SOURCE_DIR}/frontend/include/jit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
# The runtime (plain C++) and the compiler's MLIR-free entry point: what a
# framework that hands ampjit its step as MLIR text uses (examples/consumer/embed_module.cpp).
install(DIRECTORY ${AMPJIT_SOURCE_DIR}/runtime/include/ampjit/runtime DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ampjit
        FILES_MATCHING PATTERN "*.h")
install(FILES ${AMPJIT_SOURCE_DIR}/codegen/include/ampjit/Codegen/CompileModule.h
              ${AMPJIT_SOURCE_DIR}/codegen/include/ampjit/Codegen/PlanOptions.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ampjit/Codegen)
# The C API, for frameworks and languages that are not C++ (examples/consumer/embed_c.c,
# embed_python.py).
install(FILES ${AMPJIT_SOURCE_DIR}/capi/include/ampjit-c/Ampjit.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ampjit-c)
# The Python package over it, which loads the libampjit.so three directories up.
install(DIRECTORY ${AMPJIT_SOURCE_DIR}/python/ampjit DESTINATION ${CMAKE_INSTALL_LIBDIR}/python3/site-packages
        FILES_MATCHING PATTERN "*.py")
install(TARGETS ${AMPJIT_INSTALLED_TOOLS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(AMPJIT_CMAKE_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ampjit)
install(EXPORT ampjitTargets NAMESPACE ampjit:: DESTINATION ${AMPJIT_CMAKE_PACKAGE_DIR})
configure_package_config_file(${AMPJIT_SOURCE_DIR}/cmake/ampjitConfig.cmake.in
                              ${AMPJIT_BINARY_DIR}/ampjitConfig.cmake
                              INSTALL_DESTINATION ${AMPJIT_CMAKE_PACKAGE_DIR})
# 0.x: a minor version may change the API, so only the same minor matches.
write_basic_package_version_file(${AMPJIT_BINARY_DIR}/ampjitConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${AMPJIT_BINARY_DIR}/ampjitConfig.cmake ${AMPJIT_BINARY_DIR}/ampjitConfigVersion.cmake
        DESTINATION ${AMPJIT_CMAKE_PACKAGE_DIR})
