# Test programs. Each tests/unit/test_*.c is one program (linked with the
# static library so it may use internal headers) and one ctest test.
file(GLOB KILN_UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/unit/test_*.c)
foreach(src ${KILN_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE kiln_static)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests ${KILN_GEN_DIR} ${PROTOBUF_C_INCLUDE})
  add_test(NAME unit_${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(unit_${name} PROPERTIES LABELS unit)
endforeach()
if(EXISTS ${CMAKE_SOURCE_DIR}/tests/more_tests.cmake)
  include(${CMAKE_SOURCE_DIR}/tests/more_tests.cmake)
endif()
# The installed library is linked into a plain program: not meaningful for a
# sanitizer build, whose library needs the sanitizer runtime first.
if(NOT KILN_SANITIZE)
  add_test(NAME install COMMAND bash ${CMAKE_SOURCE_DIR}/tests/install/test_install.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
  set_tests_properties(install PROPERTIES LABELS unit)
endif()
include(${CMAKE_SOURCE_DIR}/tests/cli.cmake)
include(${CMAKE_SOURCE_DIR}/tests/cuda/tests.cmake)
