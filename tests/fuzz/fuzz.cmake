# libFuzzer targets (tests/fuzz/fuzz_*.c), included from tests/tests.cmake.
# Built only with -DKILN_FUZZ=ON, by tests/fuzz/build_and_run.sh, which
# configures a clang build whose CMAKE_C_FLAGS instrument all of kiln
# (-fsanitize=fuzzer-no-link,address,undefined); the targets add libFuzzer's
# main at link time.
option(KILN_FUZZ "Build the libFuzzer targets (clang; see tests/fuzz/README.md)" OFF)
if(KILN_FUZZ)
  foreach(t onnx engine npy)
    set(fuzz_srcs ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_${t}.c)
    if(t STREQUAL "npy")
      list(APPEND fuzz_srcs ${CMAKE_SOURCE_DIR}/tools/npy.c)
    endif()
    add_executable(fuzz_${t} ${fuzz_srcs})
    target_link_libraries(fuzz_${t} PRIVATE kiln_static)
    target_include_directories(fuzz_${t} PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tools
                                                 ${KILN_GEN_DIR} ${PROTOBUF_C_INCLUDE})
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
  endforeach()
endif()
