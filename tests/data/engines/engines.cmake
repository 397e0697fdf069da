# Engine fixtures written by earlier kilns (tests/data/engines/*.kiln, made by
# make_fixtures.sh), included from tests/tests.cmake: `kiln inspect` (text and
# JSON) and `kiln run` must work on every one (each format version kiln reads).
# tests/unit/test_engine_format.c (test_fixtures) also checks their outputs.
file(GLOB KILN_ENGINE_FIXTURES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/data/engines/*.kiln)
foreach(fx ${KILN_ENGINE_FIXTURES})
  get_filename_component(fx_name ${fx} NAME_WE)
  add_test(NAME engine_fixture_inspect_${fx_name} COMMAND kiln_cli inspect ${fx})
  add_test(NAME engine_fixture_inspect_json_${fx_name} COMMAND kiln_cli inspect --json ${fx})
  add_test(NAME engine_fixture_run_${fx_name} COMMAND kiln_cli run -q --random-inputs ${fx})
  set_tests_properties(engine_fixture_inspect_${fx_name} PROPERTIES LABELS unit
                       PASS_REGULAR_EXPRESSION "kiln engine \\(built by kiln [0-9]")
  set_tests_properties(engine_fixture_inspect_json_${fx_name} engine_fixture_run_${fx_name}
                       PROPERTIES LABELS unit)
endforeach()
