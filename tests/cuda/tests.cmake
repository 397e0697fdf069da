# GPU tests of the CUDA backend (registered once, only when the backend is
# built: KILN_CUDA_ENABLED from cmake/cuda.cmake). Without a GPU the program
# prints "no CUDA device: skipping" and succeeds.
if(NOT KILN_CUDA_ENABLED)
  return()
endif()
get_property(_kiln_cuda_tests GLOBAL PROPERTY KILN_CUDA_TESTS_ADDED)
if(_kiln_cuda_tests)
  return()
endif()
set_property(GLOBAL PROPERTY KILN_CUDA_TESTS_ADDED TRUE)
add_executable(test_cuda_ops ${CMAKE_SOURCE_DIR}/tests/cuda/test_cuda_ops.c)
target_link_libraries(test_cuda_ops PRIVATE kiln_static)
target_include_directories(test_cuda_ops PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
add_test(NAME cuda_ops COMMAND test_cuda_ops WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cuda_ops PROPERTIES LABELS "cuda;unit")
# The fp16/bf16 pass of the optimizer for CUDA plans (no GPU needed).
add_executable(test_cuda_precision ${CMAKE_SOURCE_DIR}/tests/cuda/test_precision.c)
target_link_libraries(test_cuda_precision PRIVATE kiln_static)
target_include_directories(test_cuda_precision PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
add_test(NAME cuda_precision COMMAND test_cuda_precision WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cuda_precision PROPERTIES LABELS "cuda;unit")
# How the tensor-core attention shares out its work (no GPU needed).
add_executable(test_cuda_plan ${CMAKE_SOURCE_DIR}/tests/cuda/test_cuda_plan.c)
target_link_libraries(test_cuda_plan PRIVATE kiln_static)
target_include_directories(test_cuda_plan PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
add_test(NAME cuda_plan COMMAND test_cuda_plan WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cuda_plan PROPERTIES LABELS "cuda;unit")
# CUDA engines end to end: graphs, fp16/bf16 (skips without a GPU).
add_executable(test_cuda_engine ${CMAKE_SOURCE_DIR}/tests/cuda/test_cuda_engine.c)
target_link_libraries(test_cuda_engine PRIVATE kiln_static)
target_include_directories(test_cuda_engine PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
add_test(NAME cuda_engine COMMAND test_cuda_engine WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cuda_engine PROPERTIES LABELS "cuda;unit")
# The differential test of CUDA plans against the CPU's level-0 plan (skips
# without a GPU; tests/cuda/emu/run.sh runs it against the emulation).
add_executable(test_cuda_diff ${CMAKE_SOURCE_DIR}/tests/cuda/test_cuda_diff.c)
target_link_libraries(test_cuda_diff PRIVATE kiln_static)
target_include_directories(test_cuda_diff PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
add_test(NAME cuda_diff COMMAND test_cuda_diff WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cuda_diff PROPERTIES LABELS "cuda;unit")
# kiln run --compare, kiln build --layer-precision (no GPU needed).
add_test(NAME cuda_cli_precision COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cuda/test_cli_precision.sh
         $<TARGET_FILE:kiln_cli> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cuda_cli_precision PROPERTIES LABELS "cuda;cli")
