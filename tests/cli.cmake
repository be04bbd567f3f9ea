# The todre command-line tool's tests and the .npy library's unit test.
#  - unit.npy (tests/unit/test_npy.c, registered by the unit loop) needs the
#    todre_npy library, which exists even when the CLI is not built.
#  - cli.<name>: one ctest per tests/cli/test_<name>.py (pytest), running the
#    tool through .npy files against the float64 references.
include(${PROJECT_SOURCE_DIR}/tools/todre/npy.cmake)
if(TARGET test_npy)
  target_link_libraries(test_npy PRIVATE todre_npy)
endif()

if(TARGET todre_cli)
  file(GLOB TODRE_CLI_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_*.py)
  foreach(py ${TODRE_CLI_TESTS})
    get_filename_component(name ${py} NAME_WE)
    string(REGEX REPLACE "^test_" "" name ${name})
    add_test(NAME cli.${name}
      COMMAND ${CMAKE_COMMAND} -E env TODRE_CLI=$<TARGET_FILE:todre_cli> PYTHONDONTWRITEBYTECODE=1
              ${Python3_EXECUTABLE} -m pytest -p no:cacheprovider -q -rs
              --rootdir=${CMAKE_CURRENT_SOURCE_DIR}/cli ${py}
      WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
    set_tests_properties(cli.${name} PROPERTIES ENVIRONMENT "${TODRE_TEST_ENV}" TIMEOUT 600)
  endforeach()
endif()
