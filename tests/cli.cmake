# The todre command-line tool's tests and the .npy library's unit test.
#  - unit.npy (tests/unit/test_npy.c, registered by the unit loop) needs the
#    todre_npy library, which exists even when the CLI is not built.
#  - cli.<name>: one ctest per tests/cli/test_<name>.py (pytest), running the
#    tool through .npy files against the float64 references.
#  - cli.cuda_emu.*: the same tool on the CUDA backend's CPU emulator
#    (tests/cuda_emu.cmake), registered as "cuda" through TODRE_BACKEND_PATH:
#    .suite runs every tests/cli test with "auto" picking the emulated
#    device, so inputs and results go through todre_context_alloc/copy;
#    .nodevice runs the info and error tests with an emulated driver that
#    sees no GPU ("cuda" listed, unavailable, with the reason; "auto" = cpu).
#    TODRE_CLI_EXPECT_REGISTRY makes each fail unless the tool sees exactly
#    that registry.
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

# The emulated module is defined by tests/cuda_emu.cmake, included after this
# file: register its CLI runs once the whole directory has been read.
function(todre_cli_cuda_emu_tests)
  if(NOT TARGET todre_cli OR NOT TARGET todre_cuda_emu)
    return()
  endif()
  set(suite "cpu=1,cuda=1" "${CMAKE_CURRENT_SOURCE_DIR}/cli")
  set(nodevice "cpu=1,cuda=0" "${CMAKE_CURRENT_SOURCE_DIR}/cli/test_info.py"
      "${CMAKE_CURRENT_SOURCE_DIR}/cli/test_errors.py")
  foreach(kind suite nodevice)
    list(POP_FRONT ${kind} registry)
    set(env TODRE_CLI=$<TARGET_FILE:todre_cli> PYTHONDONTWRITEBYTECODE=1
        TODRE_BACKEND_PATH=$<TARGET_FILE:todre_cuda_emu> TODRE_CLI_EXPECT_REGISTRY=${registry})
    if(kind STREQUAL "nodevice")
      list(APPEND env TODRE_EMU_DEVICES=0)
    endif()
    add_test(NAME cli.cuda_emu.${kind}
      COMMAND ${CMAKE_COMMAND} -E env ${env}
              ${Python3_EXECUTABLE} -m pytest -p no:cacheprovider -q -rs
              --rootdir=${CMAKE_CURRENT_SOURCE_DIR}/cli ${${kind}}
      WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
    set_tests_properties(cli.cuda_emu.${kind} PROPERTIES ENVIRONMENT "${TODRE_TEST_ENV}"
                         TIMEOUT 900)
  endforeach()
endfunction()
cmake_language(DEFER CALL todre_cli_cuda_emu_tests)
