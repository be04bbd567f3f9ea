# ABI and install guard rails (included by tests/CMakeLists.txt). They check
# the promises a distributor relies on: the exported symbols are exactly the
# TODRE_API functions of todre.h and the linker map, all in version node
# TODRE_<major>.x, the SONAME follows the major version, libtodre.so needs no
# CUDA, the headers compile alone in strict C and C++, the ABI is compatible
# with the recorded baseline (abi-compliance-checker), and an install is
# enough to build a consumer with pkg-config or find_package(todre).
include(CheckLanguage)
check_language(CXX)

set(TODRE_ABI_DIR ${CMAKE_CURRENT_SOURCE_DIR}/abi)
# todre.h includes the configured todre_version.h from here
set(TODRE_GENERATED_INCLUDE ${PROJECT_BINARY_DIR}/include)

function(todre_abi_test name)
  add_test(NAME abi.${name} COMMAND ${ARGN})
  set_tests_properties(abi.${name} PROPERTIES ENVIRONMENT "${TODRE_TEST_ENV}" TIMEOUT 300)
endfunction()

todre_abi_test(symbols ${Python3_EXECUTABLE} ${TODRE_ABI_DIR}/check_library.py symbols
               $<TARGET_FILE:todre> ${PROJECT_SOURCE_DIR}/src/todre.map
               ${PROJECT_SOURCE_DIR}/include/todre/todre.h ${PROJECT_VERSION})
todre_abi_test(dynamic ${Python3_EXECUTABLE} ${TODRE_ABI_DIR}/check_library.py dynamic
               $<TARGET_FILE:todre> libtodre.so.${PROJECT_VERSION_MAJOR})

todre_abi_test(headers.c99 bash ${TODRE_ABI_DIR}/check_headers.sh
               ${CMAKE_C_COMPILER} c c99 ${PROJECT_SOURCE_DIR}/include ${TODRE_GENERATED_INCLUDE})
# An empty compiler argument makes the test fail with a message, not vanish.
todre_abi_test(headers.cxx11 bash ${TODRE_ABI_DIR}/check_headers.sh
               "${CMAKE_CXX_COMPILER}" c++ c++11 ${PROJECT_SOURCE_DIR}/include
               ${TODRE_GENERATED_INCLUDE})
todre_abi_test(headers.cxx17 bash ${TODRE_ABI_DIR}/check_headers.sh
               "${CMAKE_CXX_COMPILER}" c++ c++17 ${PROJECT_SOURCE_DIR}/include
               ${TODRE_GENERATED_INCLUDE})

# abi-dumper + abi-compliance-checker against tests/abi/baseline (exit 77 =
# skipped only when the tools are missing; scripts/deps.sh installs them).
# The library is built with -g for it. Regenerate the baseline with
# tests/abi/update_baseline.sh BUILD_DIR only when the major version changes.
todre_abi_test(compliance bash ${TODRE_ABI_DIR}/check_abi.sh $<TARGET_FILE:todre>
               ${PROJECT_VERSION} ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(abi.compliance PROPERTIES SKIP_RETURN_CODE 77
  ENVIRONMENT "${TODRE_TEST_ENV};CC=${CMAKE_C_COMPILER}")

# Installs what the build tree already built (no rebuild), so it runs after
# `cmake --build`, like every other test.
todre_abi_test(install bash ${TODRE_ABI_DIR}/install_consumer.sh
               ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/abi_install
               ${CMAKE_COMMAND} ${CMAKE_C_COMPILER}
               ${CMAKE_INSTALL_LIBDIR} ${CMAKE_INSTALL_INCLUDEDIR} ${CMAKE_INSTALL_DATADIR}
               "${TODRE_SANITIZE}")

todre_abi_test(readme_example bash ${TODRE_ABI_DIR}/check_readme.sh
               ${CMAKE_C_COMPILER} ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/include
               ${TODRE_GENERATED_INCLUDE})
