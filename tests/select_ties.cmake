# The tie rule between identical rows (tests/unit/test_select_ties.c) at each
# CPU code path of the configuring machine: unit.select_ties runs the best
# path the CPU has (src/cpu/cpu_isa.c), unit.select_ties.<isa> each lower one
# through the cap $TODRE_CPU_ISA (scalar always; avx2 where AVX-512 exists,
# avx512 where AMX exists). The program prints the path in use. About 8 s
# per run on 2 cores.
#
# OMP_WAIT_POLICY=passive: the program makes thousands of small calls, and
# OpenMP workers spinning at the end of each region made it 5 to 10 times
# slower on a busy 2-core machine; it changes no result.
if(TARGET test_select_ties)
  target_compile_options(test_select_ties PRIVATE ${TODRE_WARNINGS})
  set_property(TEST unit.select_ties APPEND PROPERTY ENVIRONMENT "OMP_WAIT_POLICY=passive")
  set(_isas scalar)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64" AND EXISTS /proc/cpuinfo)
    file(STRINGS /proc/cpuinfo _flags REGEX "^flags" LIMIT_COUNT 1)
    if(_flags MATCHES " avx512f( |$)")
      list(APPEND _isas avx2)
    endif()
    if(_flags MATCHES " amx_bf16( |$)")
      list(APPEND _isas avx512)
    endif()
  endif()
  # the best path with Gram matrices on the FMA kernels and on BLAS
  # ($TODRE_CPU_GRAM, src/cpu/cpu_backend.c), whichever is the default here
  foreach(_gram fma blas)
    add_test(NAME unit.select_ties.gram_${_gram} COMMAND test_select_ties)
    set_tests_properties(unit.select_ties.gram_${_gram} PROPERTIES
      ENVIRONMENT "${TODRE_TEST_ENV};TODRE_CPU_GRAM=${_gram};OMP_WAIT_POLICY=passive" TIMEOUT 600)
  endforeach()
  foreach(_isa ${_isas})
    add_test(NAME unit.select_ties.${_isa} COMMAND test_select_ties)
    set_tests_properties(unit.select_ties.${_isa} PROPERTIES
      ENVIRONMENT "${TODRE_TEST_ENV};TODRE_CPU_ISA=${_isa};OMP_WAIT_POLICY=passive" TIMEOUT 600)
  endforeach()
endif()
