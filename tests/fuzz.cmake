# libFuzzer harnesses (tests/fuzz; docs/testing.md, "Fuzzing"), clang builds
# only. Each harness links its own copy of libtodre's sources (and, for the
# .npy reader, tools/todre/npy.c) built with the same instrumentation:
# -fsanitize=fuzzer-no-link,address,undefined, UBSan findings fatal.
#
#  - fuzz.<name>: runs fuzz_<name> for TODRE_FUZZ_SECONDS over the committed
#    seeds (tests/fuzz/corpus/<name>) and fails on any finding (crash, ASan
#    or UBSan report, leak, timeout, out-of-memory, or a harness check).
#    New inputs go to <build>/tests/fuzz/work/<name>/corpus, findings to
#    <build>/tests/fuzz/work/<name>/artifacts/ (see tests/fuzz/run_fuzzer.sh).
#  - Longer campaigns: tests/fuzz/campaign.sh.
#
# libFuzzer is in Debian's libclang-rt-<version>-dev (a Recommends of clang,
# so `apt-get install --no-install-recommends clang` lacks it). Without it a
# clang build registers fuzz.toolchain, which fails and says so; configure
# with -DTODRE_FUZZ=OFF to build without the fuzzers.
option(TODRE_FUZZ "Build the libFuzzer harnesses and register fuzz.* tests (clang builds)" ON)
set(TODRE_FUZZ_SECONDS 30 CACHE STRING "Seconds of fuzzing per fuzz.* test")

if(NOT TODRE_FUZZ OR NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
  return()
endif()
# ThreadSanitizer and MemorySanitizer exclude AddressSanitizer.
if(TODRE_SANITIZE MATCHES "thread|memory")
  message(STATUS "fuzzers not built: they need ASan, which -fsanitize=${TODRE_SANITIZE} excludes")
  return()
endif()

include(CheckCSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer,address,undefined")
set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=fuzzer,address,undefined")
set(CMAKE_REQUIRED_QUIET ON)
check_c_source_compiles("
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }
" TODRE_HAVE_LIBFUZZER)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
unset(CMAKE_REQUIRED_QUIET)

if(NOT TODRE_HAVE_LIBFUZZER)
  string(REGEX MATCH "^[0-9]+" _todre_clang_major "${CMAKE_C_COMPILER_VERSION}")
  message(WARNING "clang cannot link -fsanitize=fuzzer (Debian: install libclang-rt-"
                  "${_todre_clang_major}-dev); fuzz.toolchain will fail. "
                  "-DTODRE_FUZZ=OFF builds without the fuzzers.")
  add_test(NAME fuzz.toolchain
    COMMAND sh -c "echo 'fuzz: clang cannot link -fsanitize=fuzzer: install libclang-rt-*-dev (scripts/deps.sh), or configure with -DTODRE_FUZZ=OFF' >&2; exit 1")
  return()
endif()

set(TODRE_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
set(TODRE_FUZZ_SAN -fsanitize=address,undefined -fno-sanitize-recover=all
                   -fno-omit-frame-pointer -g -O2)

# libtodre's sources, instrumented (a static library: the harness is one
# executable, so no module search finds a second copy of the core).
add_library(todre_fuzz_lib STATIC ${TODRE_CORE_SOURCES} ${TODRE_CPU_SOURCES})
target_include_directories(todre_fuzz_lib
  PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/include
  PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(todre_fuzz_lib PRIVATE TODRE_BUILDING_LIBRARY _GNU_SOURCE
  TODRE_BACKEND_DIR_FULL="${TODRE_BACKEND_DIR_FULL}")
# -Wno-pass-failed: vectorisation pragmas that ASan instrumentation defeats
target_compile_options(todre_fuzz_lib PRIVATE -fsanitize=fuzzer-no-link ${TODRE_FUZZ_SAN}
                       -Wno-pass-failed)
# The arithmetic kernels keep their edge coverage but not comparison tracing:
# their comparisons are loop bounds over the data, which no mutation learns
# from, and tracing them took a third of each execution (fuzz_select, perf).
# Validation, planning and the greedy loops keep full tracing.
set_source_files_properties(
  ${PROJECT_SOURCE_DIR}/src/cpu/select_kernels.c ${PROJECT_SOURCE_DIR}/src/cpu/select_rows.c
  ${PROJECT_SOURCE_DIR}/src/cpu/select_amx.c ${PROJECT_SOURCE_DIR}/src/cpu/select_gram.c
  ${PROJECT_SOURCE_DIR}/src/cpu/select_pivot.c ${PROJECT_SOURCE_DIR}/src/cpu/relevance_qk.c
  ${PROJECT_SOURCE_DIR}/src/cpu/relevance_util.c
  TARGET_DIRECTORY todre_fuzz_lib
  PROPERTIES COMPILE_OPTIONS -fno-sanitize-coverage=trace-cmp)
target_link_libraries(todre_fuzz_lib PUBLIC PkgConfig::OPENBLAS OpenMP::OpenMP_C
                      Threads::Threads ${CMAKE_DL_LIBS} m)

# The harnesses' references and element addressing (tests/fuzz/nocov.ignorelist)
# get no coverage instrumentation. The option's name has changed (clang 14:
# -ignorelist, with -blacklist kept; clang 12: -blocklist); where none is
# known they are instrumented, which is slower, not wrong.
include(CheckCCompilerFlag)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer-no-link")
set(CMAKE_REQUIRED_QUIET ON)
set(TODRE_FUZZ_NOCOV "")
foreach(_todre_spelling ignorelist blocklist blacklist)
  check_c_compiler_flag(-fsanitize-coverage-${_todre_spelling}=${TODRE_FUZZ_DIR}/nocov.ignorelist
                        TODRE_HAVE_COVERAGE_${_todre_spelling})
  if(TODRE_HAVE_COVERAGE_${_todre_spelling})
    set(TODRE_FUZZ_NOCOV -fsanitize-coverage-${_todre_spelling}=${TODRE_FUZZ_DIR}/nocov.ignorelist)
    break()
  endif()
endforeach()
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_QUIET)

# One harness: tests/fuzz/fuzz_<name>.c + fuzz_common.c (+ extra sources).
function(todre_fuzz_harness name)
  add_executable(fuzz_${name} ${TODRE_FUZZ_DIR}/fuzz_${name}.c ${TODRE_FUZZ_DIR}/fuzz_common.c
                 ${ARGN})
  target_include_directories(fuzz_${name} PRIVATE ${TODRE_FUZZ_DIR} ${PROJECT_SOURCE_DIR}/src
                             ${PROJECT_SOURCE_DIR}/tools/todre)
  target_compile_options(fuzz_${name} PRIVATE -fsanitize=fuzzer ${TODRE_FUZZ_SAN}
                         ${TODRE_FUZZ_NOCOV} ${TODRE_WARNINGS})
  target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_${name} PRIVATE todre_fuzz_lib m)
  set_target_properties(fuzz_${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                        ${CMAKE_CURRENT_BINARY_DIR}/fuzz)
  set(dict "")
  if(EXISTS ${TODRE_FUZZ_DIR}/dict/${name}.dict)
    set(dict ${TODRE_FUZZ_DIR}/dict/${name}.dict)
  endif()
  add_test(NAME fuzz.${name}
    COMMAND bash ${TODRE_FUZZ_DIR}/run_fuzzer.sh $<TARGET_FILE:fuzz_${name}>
            ${TODRE_FUZZ_DIR}/corpus/${name} ${CMAKE_CURRENT_BINARY_DIR}/fuzz/work/${name}
            ${TODRE_FUZZ_SECONDS} "${dict}")
  set_tests_properties(fuzz.${name} PROPERTIES
    ENVIRONMENT "${TODRE_TEST_ENV}"
    TIMEOUT 600
    LABELS fuzz)
endfunction()

todre_fuzz_harness(npy ${PROJECT_SOURCE_DIR}/tools/todre/npy.c)
todre_fuzz_harness(params)
todre_fuzz_harness(dlpack)
todre_fuzz_harness(select)
todre_fuzz_harness(relevance)
