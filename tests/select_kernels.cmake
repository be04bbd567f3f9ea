# The CPU stage-1 row kernels (src/cpu/select_kernels.c) at each ISA level
# this machine has, against the references in
# tests/kernels/test_select_kernels.c: unit.select_kernels.<isa> caps the
# level with $TODRE_CPU_ISA. The kernel table is internal to libtodre (hidden
# symbols), so the program is built from the kernel sources themselves.
# Under a second.
set(_kisas generic ${TODRE_TEST_CPU_LEVELS}) # tests/CMakeLists.txt
add_executable(test_select_kernels ${CMAKE_CURRENT_SOURCE_DIR}/kernels/test_select_kernels.c
               ${PROJECT_SOURCE_DIR}/src/cpu/select_kernels.c ${PROJECT_SOURCE_DIR}/src/cpu/cpu_isa.c)
target_include_directories(test_select_kernels PRIVATE ${PROJECT_SOURCE_DIR}/src
                           ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/include)
target_compile_definitions(test_select_kernels PRIVATE _GNU_SOURCE)
# the references round once per operation, as the kernels' definitions say
target_compile_options(test_select_kernels PRIVATE ${TODRE_WARNINGS} -ffp-contract=off)
target_link_libraries(test_select_kernels PRIVATE PkgConfig::CMOCKA Threads::Threads m)
foreach(_isa ${_kisas})
  add_test(NAME unit.select_kernels.${_isa} COMMAND test_select_kernels)
  set_tests_properties(unit.select_kernels.${_isa} PROPERTIES
    ENVIRONMENT "${TODRE_TEST_ENV};TODRE_CPU_ISA=${_isa}" TIMEOUT 120)
endforeach()
