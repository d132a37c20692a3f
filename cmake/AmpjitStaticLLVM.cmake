# Debian's MLIR/LLVM 22 packages are built with LLVM_LINK_LLVM_DYLIB: every
# imported MLIR target lists the 150 MB `libLLVM.so` as "LLVM" in its link
# interface. We rewrite that entry to the static component libraries so our
# binaries are self-contained and run on machines without LLVM (the GPU box).
# tests/check_no_libllvm.sh proves it with readelf.
set(LLVM_LINK_LLVM_DYLIB OFF)
set(MLIR_LINK_MLIR_DYLIB OFF)

set(AMPJIT_LLVM_STATIC_COMPONENTS LLVMSupport LLVMRemarks LLVMBitstreamReader LLVMDemangle)

# LLVMSupport's interface names zstd::libzstd_shared; Findzstd only defines it
# when it finds the library, so provide it from libzstd-dev if it is missing.
if(NOT TARGET zstd::libzstd_shared)
  find_library(AMPJIT_ZSTD_LIBRARY NAMES zstd REQUIRED)
  add_library(zstd::libzstd_shared UNKNOWN IMPORTED)
  set_target_properties(zstd::libzstd_shared PROPERTIES IMPORTED_LOCATION "${AMPJIT_ZSTD_LIBRARY}")
endif()
if(NOT TARGET ZLIB::ZLIB)
  find_package(ZLIB REQUIRED)
endif()

get_property(_ampjit_imported DIRECTORY PROPERTY IMPORTED_TARGETS)
foreach(_target IN LISTS _ampjit_imported)
  get_target_property(_libs ${_target} INTERFACE_LINK_LIBRARIES)
  if(NOT _libs)
    continue()
  endif()
  list(FIND _libs "LLVM" _index)
  if(_index EQUAL -1)
    continue()
  endif()
  list(REMOVE_ITEM _libs "LLVM")
  list(APPEND _libs ${AMPJIT_LLVM_STATIC_COMPONENTS})
  set_target_properties(${_target} PROPERTIES INTERFACE_LINK_LIBRARIES "${_libs}")
endforeach()

# Static archives pull only the objects they need; --as-needed then drops the
# shared libraries (z3, zlib) that no pulled object references.
add_link_options("LINKER:--as-needed")
