# ABI and install guard rails (included by tests/CMakeLists.txt). They check
# the promises a distributor relies on: the exported symbols are exactly the
# linker map, the SONAME follows the major version, libtodre.so needs no CUDA,
# the headers compile alone in strict C and C++, and an install is enough to
# build a consumer with pkg-config or find_package(todre).
include(CheckLanguage)
check_language(CXX)

set(TODRE_ABI_DIR ${CMAKE_CURRENT_SOURCE_DIR}/abi)

function(todre_abi_test name)
  add_test(NAME abi.${name} COMMAND ${ARGN})
  set_tests_properties(abi.${name} PROPERTIES ENVIRONMENT "${TODRE_TEST_ENV}" TIMEOUT 300)
endfunction()

todre_abi_test(symbols ${Python3_EXECUTABLE} ${TODRE_ABI_DIR}/check_library.py symbols
               $<TARGET_FILE:todre> ${PROJECT_SOURCE_DIR}/src/todre.map)
todre_abi_test(dynamic ${Python3_EXECUTABLE} ${TODRE_ABI_DIR}/check_library.py dynamic
               $<TARGET_FILE:todre> libtodre.so.${PROJECT_VERSION_MAJOR})

todre_abi_test(headers.c99 bash ${TODRE_ABI_DIR}/check_headers.sh
               ${CMAKE_C_COMPILER} c c99 ${PROJECT_SOURCE_DIR}/include)
# An empty compiler argument makes the test fail with a message, not vanish.
todre_abi_test(headers.cxx11 bash ${TODRE_ABI_DIR}/check_headers.sh
               "${CMAKE_CXX_COMPILER}" c++ c++11 ${PROJECT_SOURCE_DIR}/include)
todre_abi_test(headers.cxx17 bash ${TODRE_ABI_DIR}/check_headers.sh
               "${CMAKE_CXX_COMPILER}" c++ c++17 ${PROJECT_SOURCE_DIR}/include)

# Installs what the build tree already built (no rebuild), so it runs after
# `cmake --build`, like every other test.
todre_abi_test(install bash ${TODRE_ABI_DIR}/install_consumer.sh
               ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/abi_install
               ${CMAKE_COMMAND} ${CMAKE_C_COMPILER}
               ${CMAKE_INSTALL_LIBDIR} ${CMAKE_INSTALL_INCLUDEDIR} "${TODRE_SANITIZE}")

todre_abi_test(readme_example bash ${TODRE_ABI_DIR}/check_readme.sh
               ${CMAKE_C_COMPILER} ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/include)
