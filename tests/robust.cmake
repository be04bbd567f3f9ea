# Robustness tests (issue #12): helpers of the thread, allocation-failure and
# memory-bound unit tests, the backend module the registry tests load, and
# (below) the valgrind runs and the ThreadSanitizer environment.
#
#  - unit.threads       tests/unit/test_threads.c (8 threads, own contexts)
#  - unit.alloc_fail    tests/robust/test_alloc_fail.c with the interposed
#                       allocator of tests/robust/alloc_interpose.c
#  - unit.memory_bound  tests/robust/test_memory_bound.c (peak RSS)
#  - valgrind.*         memcheck on the examples and the CLI (when valgrind
#                       is found)
#
# The last two programs live here, not in tests/unit (whose every test_*.c
# is registered in every build), because some builds cannot run them and a
# test may skip only for absent hardware: such builds do not register them.
#  - unit.memory_bound: not in sanitizer builds (shadow memory and quarantine
#    make resident-set figures meaningless). It runs in the Release (gcc) and
#    clang builds of scripts/test.sh.
#  - unit.alloc_fail: not where clang links its sanitizer runtime statically
#    (its default), whose allocator a definition in the program cannot
#    replace. It runs in the Release and clang builds, and in the gcc ASan
#    build (shared runtime, which the interposer forwards to), where
#    LeakSanitizer checks again.
set(TODRE_ROBUST_DIR ${CMAKE_CURRENT_SOURCE_DIR}/robust)

add_library(todre_robust_util STATIC ${TODRE_ROBUST_DIR}/robust_util.c)
target_include_directories(todre_robust_util PUBLIC ${TODRE_ROBUST_DIR})

# A backend module with no device, registered as "robustfake" by the
# registry tests through $TODRE_BACKEND_PATH. Kept out of the build root, so
# that no other test's registry sees it.
add_library(todre_robustfake MODULE ${TODRE_ROBUST_DIR}/fake_module.c)
target_include_directories(todre_robustfake PRIVATE ${PROJECT_SOURCE_DIR}/src
                           ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/include)
set_target_properties(todre_robustfake PROPERTIES PREFIX "lib" OUTPUT_NAME "todre-robustfake"
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/robust C_VISIBILITY_PRESET hidden)

# A sanitizer runtime linked statically into the program (clang's default)
# defines malloc & co. itself, so the interposer cannot take over. GCC links
# its runtimes as shared libraries, which the interposer forwards to (dlsym
# RTLD_NEXT), so LeakSanitizer still sees every block.
set(TODRE_ROBUST_STATIC_SANITIZER OFF)
if(TODRE_SANITIZE AND CMAKE_C_COMPILER_ID MATCHES "Clang" AND
   NOT CMAKE_EXE_LINKER_FLAGS MATCHES "shared-libsan")
  set(TODRE_ROBUST_STATIC_SANITIZER ON)
endif()

# A unit test from this directory, built and registered like tests/unit's.
function(todre_robust_unit feature)
  add_executable(test_${feature} ${TODRE_ROBUST_DIR}/test_${feature}.c ${ARGN})
  target_include_directories(test_${feature} PRIVATE ${PROJECT_SOURCE_DIR}/src
                             ${CMAKE_CURRENT_SOURCE_DIR}/common)
  target_link_libraries(test_${feature} PRIVATE todre PkgConfig::CMOCKA m todre_robust_util
                        Threads::Threads)
  if(TARGET todre_testcommon)
    target_link_libraries(test_${feature} PRIVATE todre_testcommon)
  endif()
  add_test(NAME unit.${feature} COMMAND test_${feature})
  set_tests_properties(unit.${feature} PROPERTIES ENVIRONMENT "${TODRE_TEST_ENV}" TIMEOUT 600)
endfunction()

if(NOT TODRE_ROBUST_STATIC_SANITIZER)
  todre_robust_unit(alloc_fail ${TODRE_ROBUST_DIR}/alloc_interpose.c)
  # the allocator runs before a shared sanitizer runtime has its shadow
  # memory: never instrument it
  if(TODRE_SANITIZE)
    set_source_files_properties(${TODRE_ROBUST_DIR}/alloc_interpose.c PROPERTIES
                                COMPILE_OPTIONS "-fno-sanitize=all")
  endif()
  target_link_libraries(test_alloc_fail PRIVATE ${CMAKE_DL_LIBS})
  add_dependencies(test_alloc_fail todre_robustfake)
endif()
if(NOT TODRE_SANITIZE)
  todre_robust_unit(memory_bound)
endif()
if(TARGET test_threads)
  target_link_libraries(test_threads PRIVATE todre_robust_util Threads::Threads)
  add_dependencies(test_threads todre_robustfake)
endif()

# ---- ThreadSanitizer ------------------------------------------------------------------
# In a TODRE_SANITIZE=thread build every unit test runs with:
#  - TSAN_OPTIONS=ignore_noninstrumented_modules=1: accesses and interceptors
#    (malloc, memset, pthread_mutex_*) inside libraries that are not built
#    with TSan (the OpenMP runtime, OpenBLAS, libc) are not reported; they
#    synchronise through atomics TSan cannot see. Races in libtodre's own
#    code, including its OpenMP regions, are still reported.
#    allocator_may_return_null=1: an allocation too large for TSan's
#    allocator returns NULL, as libc's does, instead of aborting the test
#    (the library's out-of-memory paths are part of what is tested).
#  - OMP_TOOL_LIBRARIES=<libarcher.so> where the OpenMP runtime is LLVM's
#    libomp (clang): Archer, LLVM's OMPT tool for TSan, tells TSan about the
#    OpenMP runtime's synchronisation (fork, join, barriers, tasks), so
#    libtodre's OpenMP regions run with their real thread counts. GCC's
#    libgomp has no such tool; a TSan build against libgomp reports every
#    OpenMP region (the team's barrier is invisible), so it runs with
#    OMP_THREAD_LIMIT=1 instead (each OpenMP region on the calling thread
#    only; application threads are still concurrent).
if(TODRE_SANITIZE MATCHES "thread")
  set(TODRE_TSAN_ENV "TSAN_OPTIONS=ignore_noninstrumented_modules=1:allocator_may_return_null=1")
  set(_omp_dirs "")
  foreach(_lib ${OpenMP_C_LIB_NAMES})
    if(OpenMP_${_lib}_LIBRARY)
      get_filename_component(_dir "${OpenMP_${_lib}_LIBRARY}" DIRECTORY)
      list(APPEND _omp_dirs "${_dir}")
    endif()
  endforeach()
  find_library(TODRE_ARCHER_LIBRARY NAMES archer HINTS ${_omp_dirs} NO_DEFAULT_PATH)
  if("omp" IN_LIST OpenMP_C_LIB_NAMES AND TODRE_ARCHER_LIBRARY)
    list(APPEND TODRE_TSAN_ENV "OMP_TOOL_LIBRARIES=${TODRE_ARCHER_LIBRARY}")
    message(STATUS "todre: TSan tests run OpenMP with Archer (${TODRE_ARCHER_LIBRARY})")
  else()
    list(APPEND TODRE_TSAN_ENV "OMP_THREAD_LIMIT=1")
    message(WARNING "todre: TSan without LLVM's libomp and libarcher: the tests run every "
            "OpenMP region on one thread (OMP_THREAD_LIMIT=1). For full coverage configure "
            "with clang (and libomp-dev installed); see docs/testing.md.")
  endif()
  file(GLOB _unit CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_*.c)
  foreach(_src ${_unit})
    get_filename_component(_name ${_src} NAME_WE)
    string(REGEX REPLACE "^test_" "" _feature ${_name})
    if(TEST unit.${_feature})
      set_property(TEST unit.${_feature} APPEND PROPERTY ENVIRONMENT ${TODRE_TSAN_ENV})
    endif()
  endforeach()
endif()

# ---- valgrind memcheck ------------------------------------------------------------------
# valgrind.example.*: the quickstart examples; valgrind.cli.*: the todre tool
# on small .npy inputs (tests/robust/make_cli_inputs.py, made by the fixture
# valgrind.inputs), success and error paths. Each passes when memcheck finds
# no error (invalid accesses, uninitialised values, bad frees, definitely or
# indirectly lost blocks; tests/robust/valgrind_run.sh) and the output is
# what the command prints normally. Not in sanitizer builds (valgrind cannot
# run sanitized programs). Environment:
#  - OPENBLAS_CORETYPE=Sandybridge: valgrind emulates FMA instructions slowly;
#    OpenBLAS's Haswell / Zen kernels made the examples' Gram matrix take 85 s
#    under memcheck, its AVX kernels without FMA take 6 s. What memcheck
#    checks in libtodre does not depend on OpenBLAS's kernel.
#  - TODRE_BACKEND_PATH empty: only the CPU backend. A CUDA module would load
#    the CUDA driver, which is not memcheck-clean; valgrind.cli.info loads the
#    test module of tests/robust instead, to check the registry's module path.
# Suppressions (tests/robust/valgrind.supp) cover only runtime internals,
# each with its reason.
find_program(TODRE_VALGRIND valgrind)
# valgrind before 3.20 cannot read clang's DWARF 5 debug information (forms
# strx / addrx: "Possibly corrupted debuginfo file. I can't recover") and
# gives up on libtodre; GCC's DWARF 5 it reads. Such a pair runs no
# valgrind.* tests (the GCC build does).
set(_vg_dwarf_ok ON)
if(TODRE_VALGRIND AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  execute_process(COMMAND ${TODRE_VALGRIND} --version OUTPUT_VARIABLE _vg_version
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  string(REGEX REPLACE "^valgrind-" "" _vg_version "${_vg_version}")
  if(_vg_version VERSION_LESS 3.20 AND NOT CMAKE_C_FLAGS MATCHES "-gdwarf-4")
    set(_vg_dwarf_ok OFF)
    message(STATUS "todre: valgrind ${_vg_version} cannot read clang's DWARF 5: valgrind.* "
            "tests not registered (the GCC build runs them, or add -gdwarf-4)")
  endif()
endif()
if(TODRE_VALGRIND AND NOT TODRE_SANITIZE AND _vg_dwarf_ok)
  set(TODRE_VG_RUN ${TODRE_ROBUST_DIR}/valgrind_run.sh ${TODRE_VALGRIND}
      ${TODRE_ROBUST_DIR}/valgrind.supp CACHE INTERNAL "")
  set(TODRE_VG_ENV "OPENBLAS_CORETYPE=Sandybridge" "TODRE_BACKEND_PATH=" CACHE INTERNAL "")
  set(TODRE_VG_INPUTS ${CMAKE_CURRENT_BINARY_DIR}/robust/cli CACHE INTERNAL "")
  file(MAKE_DIRECTORY ${TODRE_VG_INPUTS})
  set(TODRE_VG_MODULES ${CMAKE_CURRENT_BINARY_DIR}/robust CACHE INTERNAL "")
  set(TODRE_VG_PYTHON ${Python3_EXECUTABLE} CACHE INTERNAL "")
  set(TODRE_VG_SCRIPT ${TODRE_ROBUST_DIR}/make_cli_inputs.py CACHE INTERNAL "")

  # name, expected exit status, output pattern, command...
  function(todre_valgrind_test name rc pattern)
    add_test(NAME valgrind.${name} COMMAND ${TODRE_VG_RUN} ${rc} ${pattern} -- ${ARGN}
             WORKING_DIRECTORY ${TODRE_VG_INPUTS})
    set_tests_properties(valgrind.${name} PROPERTIES ENVIRONMENT "${TODRE_VG_ENV}" TIMEOUT 300
                         LABELS valgrind)
  endfunction()

  # Registered once the whole project has been read: the examples are
  # defined after tests/ (examples/CMakeLists.txt).
  function(todre_valgrind_tests)
    foreach(lang c cpp)
      if(TARGET example_${lang}_quickstart)
        todre_valgrind_test(example.${lang}_quickstart 0 "^kept 288 of 2880 tokens"
                            $<TARGET_FILE:example_${lang}_quickstart>)
      endif()
    endforeach()
    if(NOT TARGET todre_cli)
      return()
    endif()
    add_test(NAME valgrind.inputs
             COMMAND ${TODRE_VG_PYTHON} ${TODRE_VG_SCRIPT} ${TODRE_VG_INPUTS})
    set_tests_properties(valgrind.inputs PROPERTIES FIXTURES_SETUP todre_vg_inputs LABELS valgrind
                         TIMEOUT 120)
    set(cli $<TARGET_FILE:todre_cli>)
    set(num "[0-9.e+-]+")
    todre_valgrind_test(cli.select_f32 0 "^[0-9]+( [0-9]+){19}$"
                        ${cli} select --embeddings emb32.npy --keep 20)
    todre_valgrind_test(cli.select_f16_maxmin_cls 0 "\"k\": 20"
                        ${cli} select --embeddings emb16.npy --cls cls.npy --ratio 0.1
                        --objective max-min --json)
    todre_valgrind_test(cli.select_cls_topk 0 "^[0-9]+( [0-9]+){9}$"
                        ${cli} select --embeddings emb16.npy --cls cls.npy --keep 10
                        --objective cls-topk --order selection)
    todre_valgrind_test(cli.relevance_probs 0 "^${num} ${num} [01]$"
                        ${cli} relevance --attn attn.npy --types types.npy)
    todre_valgrind_test(cli.relevance_qk 0 "\"alpha_t2v\""
                        ${cli} relevance --q q.npy --k k.npy --types types.npy --json)
    todre_valgrind_test(cli.error_dtype 2 "dtype <i4 is not supported"
                        ${cli} select --embeddings bad.npy --keep 5)
    todre_valgrind_test(cli.error_missing 2 "missing.npy"
                        ${cli} relevance --attn missing.npy --types types.npy)
    todre_valgrind_test(cli.info 0 "robustfake: unavailable" ${cli} info)
    set_tests_properties(valgrind.cli.info PROPERTIES ENVIRONMENT
                         "OPENBLAS_CORETYPE=Sandybridge;TODRE_BACKEND_PATH=${TODRE_VG_MODULES}")
    get_property(all DIRECTORY ${PROJECT_SOURCE_DIR} PROPERTY TESTS)
    foreach(t ${all})
      if(t MATCHES "^valgrind\\.cli\\.")
        set_tests_properties(${t} PROPERTIES FIXTURES_REQUIRED todre_vg_inputs)
      endif()
    endforeach()
  endfunction()
  cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL todre_valgrind_tests)
elseif(NOT TODRE_VALGRIND)
  message(STATUS "todre: valgrind not found, valgrind.* tests not registered")
endif()
