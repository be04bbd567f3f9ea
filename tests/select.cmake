# Stage-1 (selection) tests: fixtures from the float64 reference, and the .npy
# reader the fixture loader in tests/common uses.
include(${PROJECT_SOURCE_DIR}/tools/todre/npy.cmake)  # defines todre_npy once
if(TARGET todre_testcommon)
  target_link_libraries(todre_testcommon PUBLIC todre_npy)
endif()

# Inputs + reference outputs (tests/reference/gen_select_cases.py). Re-runs are
# free when neither the generator nor the reference changed (stamp file).
add_test(NAME select.fixtures
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/reference/gen_select_cases.py
          --out ${TODRE_TEST_DATA}/select)
set_tests_properties(select.fixtures PROPERTIES
  FIXTURES_SETUP select_cases ENVIRONMENT "${TODRE_TEST_ENV}" TIMEOUT 600)

if(TEST unit.select_reference)
  set_tests_properties(unit.select_reference PROPERTIES FIXTURES_REQUIRED select_cases)
endif()

# The reference's own sanity tests (pytest), cheap.
add_test(NAME select.reference_py
  COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider
          ${CMAKE_CURRENT_SOURCE_DIR}/reference/test_todre_ref.py)
set_tests_properties(select.reference_py PROPERTIES ENVIRONMENT "${TODRE_TEST_ENV}" TIMEOUT 300)

# The foundation/selection test programs and helpers build warning-free.
foreach(t todre_testcommon test_errors test_context test_dlpack test_params test_registry
          test_select_config test_select_contract test_select_reference test_select_batch
          test_select_rows)
  if(TARGET ${t})
    target_compile_options(${t} PRIVATE ${TODRE_WARNINGS})
  endif()
endforeach()
if(TARGET test_errors)
  target_link_libraries(test_errors PRIVATE Threads::Threads)
endif()
