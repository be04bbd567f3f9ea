# The ROWS strategy on the FMA kernels (tests/unit/test_select_rows_fma.c) at
# each CPU code path this machine has: unit.select_rows_fma runs the default
# path, unit.select_rows_fma.<isa> caps it with $TODRE_CPU_ISA (src/cpu/
# cpu_isa.c). Levels above the CPU's own are registered only where the
# configuring machine has them (they would repeat the avx2 run). About 2 s
# per run on the 2-core CI machine (scalar: about 4 s). test_bf16_products_kernel
# asserts which bf16 kernel runs (VDPBF16PS or FMAs) from the CPU's cpuid
# (AVX512_BF16, vendor) and $TODRE_CPU_BF16.
if(TARGET test_select_rows_fma)
  target_compile_options(test_select_rows_fma PRIVATE ${TODRE_WARNINGS})
  set(_isas scalar ${TODRE_TEST_CPU_LEVELS}) # tests/CMakeLists.txt
  # in a TSan build (robust.cmake, included before this file), the TSan
  # environment too: scripts/test.sh's TSan stage runs the FMA levels, whose
  # greedy loop has its own OpenMP region (the lookahead, select_greedy.c)
  set(_env ${TODRE_TEST_ENV})
  if(TODRE_TSAN_ENV)
    list(APPEND _env ${TODRE_TSAN_ENV})
  endif()
  foreach(_isa ${_isas})
    add_test(NAME unit.select_rows_fma.${_isa} COMMAND test_select_rows_fma)
    set_tests_properties(unit.select_rows_fma.${_isa} PROPERTIES
      ENVIRONMENT "${_env};TODRE_CPU_ISA=${_isa}" TIMEOUT 300)
    # Gram matrices (GRAM, the ISOLATED pivot) on the FMA kernels and on
    # BLAS, whichever the backend would choose here ($TODRE_CPU_GRAM,
    # src/cpu/cpu_backend.c): both must equal GEMV on the exact inputs
    if(NOT _isa STREQUAL "scalar")
      foreach(_gram fma blas)
        add_test(NAME unit.select_rows_fma.${_isa}.gram_${_gram} COMMAND test_select_rows_fma)
        set_tests_properties(unit.select_rows_fma.${_isa}.gram_${_gram} PROPERTIES
          ENVIRONMENT "${_env};TODRE_CPU_ISA=${_isa};TODRE_CPU_GRAM=${_gram}" TIMEOUT 300)
      endforeach()
    endif()
    # bf16 rows on AVX-512 by both kernels ($TODRE_CPU_BF16, src/cpu/
    # select_rows.c): VDPBF16PS (the default on AMD CPUs with AVX512_BF16;
    # where the CPU lacks it the run takes the FMA kernel, and the test
    # expects that) and the widening FMA kernel (the default elsewhere)
    if(_isa STREQUAL "avx512")
      foreach(_bf16 dp fma)
        add_test(NAME unit.select_rows_fma.avx512.bf16_${_bf16} COMMAND test_select_rows_fma)
        set_tests_properties(unit.select_rows_fma.avx512.bf16_${_bf16} PROPERTIES
          ENVIRONMENT "${_env};TODRE_CPU_ISA=avx512;TODRE_CPU_BF16=${_bf16}" TIMEOUT 300)
      endforeach()
    endif()
  endforeach()
  # the lookahead's teams of 3 and 4 threads (test_first_batch_from_pivot
  # asks for 1, 3 and 4): a context runs at most as many threads as the
  # processors, so on the 2-core CI machines $TODRE_CPU_PROCS=4 stands for
  # 4 of them (src/cpu/cpu_backend.c), oversubscribed; the default path
  add_test(NAME unit.select_rows_fma.teams COMMAND test_select_rows_fma)
  set_tests_properties(unit.select_rows_fma.teams PROPERTIES
    ENVIRONMENT "${_env};TODRE_CPU_PROCS=4" TIMEOUT 300)
endif()
