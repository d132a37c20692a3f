# cmake -DINPUT=<file.cu> -DOUTPUT=<file.cpp> -P RewriteLaunches.cmake
#
# Turns a .cu file into C++ the host compiler builds against EmulatedCudaLanguage.h:
# every `kernel<<<grid, block[, shared[, stream]]>>>(` becomes
# `::ampjit::emulation::launch(grid, block[, shared[, stream]])
# .kernel("kernel", [](auto... p) { kernel(p...); })(` (CudaEmulation.h says why).
# A launch configuration holds no `>` and a kernel's template arguments no
# `<`, `>` or `;` (true of every launch in runtime/lib/cuda); a launch the
# pattern misses is left as `<<<`, which the host compiler refuses, so
# nothing is skipped silently.
file(READ "${INPUT}" source)
string(REGEX REPLACE "([A-Za-z_][A-Za-z0-9_:]*(<[^<>;]*>)?)<<<([^>]*)>>>\\("
       "::ampjit::emulation::launch(\\3).kernel(\"\\1\", [](auto... p) { \\1(p...); })(" rewritten "${source}")
string(FIND "${rewritten}" "<<<" leftover)
if(NOT leftover EQUAL -1)
  message(FATAL_ERROR "${INPUT}: a kernel launch the emulation cannot rewrite remains")
endif()
file(WRITE "${OUTPUT}.tmp" "// Generated from ${INPUT} by RewriteLaunches.cmake: do not edit.\n"
     "#include \"EmulatedCudaLanguage.h\"\n#line 1 \"${INPUT}\"\n${rewritten}")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
