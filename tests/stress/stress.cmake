# Concurrency stress test (tests/stress/stress.c), included from tests/tests.cmake.
#   stress   6 threads x 2 contexts each on one engine (and a copy loaded from
#            memory) for 5 s, outputs checked against a single-threaded run.
#            Longer by hand: build/kiln_stress --seconds 600 --threads 16
add_executable(kiln_stress ${CMAKE_SOURCE_DIR}/tests/stress/stress.c)
target_link_libraries(kiln_stress PRIVATE kiln_static Threads::Threads m)
add_test(NAME stress COMMAND kiln_stress --seconds 5 --threads 6 WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(stress PROPERTIES LABELS "stress;threads" TIMEOUT 300)
