# Stage-2 (relevance) tests: the fixture generator (float64 NumPy reference)
# runs once as a ctest fixture; the C tests that compare against it read the
# .npy files it writes with the shared reader (todre_npy).
if(NOT TARGET todre_npy)
  include(${PROJECT_SOURCE_DIR}/tools/todre/npy.cmake)
endif()

add_test(NAME relevance.fixtures
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/reference/gen_relevance_cases.py
                 --out ${TODRE_TEST_DATA}/relevance)
set_tests_properties(relevance.fixtures PROPERTIES
  FIXTURES_SETUP relevance_data ENVIRONMENT "${TODRE_TEST_ENV}" TIMEOUT 600)

foreach(t relevance_ref relevance_long)
  if(TEST unit.${t})
    target_link_libraries(test_${t} PRIVATE todre_npy)
    set_tests_properties(unit.${t} PROPERTIES FIXTURES_REQUIRED relevance_data)
  endif()
endforeach()

# The stage-2 test programs build warning-free.
foreach(t test_relevance_chunked test_relevance_contract test_relevance_decision
          test_relevance_exp test_relevance_long test_relevance_ref)
  if(TARGET ${t})
    target_compile_options(${t} PRIVATE ${TODRE_WARNINGS})
  endif()
endforeach()
