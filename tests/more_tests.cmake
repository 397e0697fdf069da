# More test targets, included from tests/tests.cmake. Keep one section per
# target group.

# ---- ONNX conformance runner ------------------------------------------------
# kiln_conformance runs ONNX backend node tests (model.onnx + test_data_set_*)
# and compares kiln's outputs with the expected ones.
add_executable(kiln_conformance ${CMAKE_SOURCE_DIR}/tests/conformance/conformance.c)
target_link_libraries(kiln_conformance PRIVATE kiln_static)
target_include_directories(kiln_conformance PRIVATE ${CMAKE_SOURCE_DIR}/src ${KILN_GEN_DIR}
                                                    ${PROTOBUF_C_INCLUDE})

set(KILN_ONNX_NODE_TESTS /usr/share/libonnx-testdata/data/node)
if(EXISTS ${KILN_ONNX_NODE_TESTS})
  set(KILN_CONFORMANCE_ARGS)
  if(EXISTS ${CMAKE_SOURCE_DIR}/tests/conformance/node_passing.txt)
    list(APPEND KILN_CONFORMANCE_ARGS --expect ${CMAKE_SOURCE_DIR}/tests/conformance/node_passing.txt)
  endif()
  add_test(NAME conformance
           COMMAND kiln_conformance ${KILN_CONFORMANCE_ARGS} ${KILN_ONNX_NODE_TESTS}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(conformance PROPERTIES LABELS "conformance" TIMEOUT 3600)
endif()

# The pytorch-converted and pytorch-operator suites beside the node tests.
set(KILN_ONNX_PYTORCH_TESTS /usr/share/libonnx-testdata/data/pytorch-converted
                            /usr/share/libonnx-testdata/data/pytorch-operator)
if(EXISTS /usr/share/libonnx-testdata/data/pytorch-converted)
  add_test(NAME conformance_pytorch
           COMMAND kiln_conformance --expect ${CMAKE_SOURCE_DIR}/tests/conformance/pytorch_passing.txt
                   ${KILN_ONNX_PYTORCH_TESTS}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(conformance_pytorch PROPERTIES LABELS "conformance" TIMEOUT 1800)
endif()

# The same suites under the debug arena check (KILN_DEBUG_ARENA=1,
# docs/memory.md): every layer's reads of the activation arena are checked
# against what its producers were handed, outputs are poisoned first and
# checked to be written. About a second each.
if(EXISTS ${KILN_ONNX_NODE_TESTS})
  add_test(NAME conformance_debug_arena
           COMMAND kiln_conformance ${KILN_CONFORMANCE_ARGS} ${KILN_ONNX_NODE_TESTS}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(conformance_debug_arena PROPERTIES LABELS "conformance" TIMEOUT 3600
                       ENVIRONMENT KILN_DEBUG_ARENA=1)
endif()
if(EXISTS /usr/share/libonnx-testdata/data/pytorch-converted)
  add_test(NAME conformance_pytorch_debug_arena
           COMMAND kiln_conformance --expect ${CMAKE_SOURCE_DIR}/tests/conformance/pytorch_passing.txt
                   ${KILN_ONNX_PYTORCH_TESTS}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(conformance_pytorch_debug_arena PROPERTIES LABELS "conformance" TIMEOUT 1800
                       ENVIRONMENT KILN_DEBUG_ARENA=1)
endif()

# ---- test_optimizer_diff refuses a malformed KILN_DIFF_* ---------------------
# (KILN_DIFF_ITERS=abc ran no graph at all and passed)
add_test(NAME unit_test_optimizer_diff_bad_env COMMAND test_optimizer_diff WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(unit_test_optimizer_diff_bad_env PROPERTIES LABELS unit ENVIRONMENT "KILN_DIFF_ITERS=abc"
                     PASS_REGULAR_EXPRESSION "KILN_DIFF_ITERS='abc': expected a whole number")
