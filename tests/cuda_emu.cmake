# The CUDA backend on the CPU emulator (src/cuda/emu), on any machine: no
# GPU, driver or nvcc needed. The emulator runs CUDA threads as fibers and
# implements the runtime, cuBLAS and CUB calls the module makes, with the
# documented semantics and contract checks (device vs host pointers, launch
# limits, shared-memory opt-in, operands inside their allocations, work that
# runs only when the host waits). It checks the module's logic end to end;
# it does not replace unit.cuda_parity on a GPU (real warps, memory model,
# speed).
#
#  - cuda.kernels_emulated: the kernels alone against float64 references,
#    threads resumed in ascending and then descending order (a missing
#    barrier shows up as a difference).
#  - cuda.parity_emulated: tests/unit/test_cuda_parity.c against the whole
#    module built for the emulator (libtodre-cuda-emu.so, loaded through
#    TODRE_CUDA_MODULE), plus the emulator's counters: no allocation and no
#    host wait on the hot path, no contract violation.
#  - cuda.contract_emulated: tests/unit/test_cuda_contract.c with a CUDA
#    device present (host memory given to a CUDA context, and so on).
include(CheckIncludeFile)
check_include_file(ucontext.h TODRE_HAVE_UCONTEXT)
include(CheckLanguage)
check_language(CXX)
if(NOT TODRE_HAVE_UCONTEXT OR NOT CMAKE_CXX_COMPILER)
  message(STATUS "libtodre: no ucontext.h or C++ compiler, the CUDA emulator tests are not built")
  return()
endif()
enable_language(CXX)

set(TODRE_EMU ${PROJECT_SOURCE_DIR}/src/cuda/emu)
set(TODRE_EMU_GEN ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu)
file(MAKE_DIRECTORY ${TODRE_EMU_GEN})

# The emulated runtime + cuBLAS: one shared library, so that the test and
# the dlopen()ed module see the same allocations and queue.
add_library(todre_cudaemu SHARED ${TODRE_EMU}/rt/emu_rt.cpp ${TODRE_EMU}/rt/cublas_emu.cpp)
target_include_directories(todre_cudaemu PUBLIC ${TODRE_EMU}/fake
                           PRIVATE ${PROJECT_SOURCE_DIR}/src)
set_target_properties(todre_cudaemu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
                      CXX_EXTENSIONS OFF LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/emu)

# Kernels alone (device code extracted by strip_kernels.py).
foreach(part select_kernels relevance)
  add_custom_command(OUTPUT ${TODRE_EMU_GEN}/${part}.inc
    COMMAND ${Python3_EXECUTABLE} ${TODRE_EMU}/strip_kernels.py
            ${PROJECT_SOURCE_DIR}/src/cuda/${part}.cu ${TODRE_EMU_GEN}/${part}.inc
    DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/${part}.cu ${TODRE_EMU}/strip_kernels.py
    VERBATIM)
endforeach()
add_executable(test_cuda_kernels_emulated ${TODRE_EMU}/emu_kernels_test.cpp
               ${TODRE_EMU_GEN}/select_kernels.inc ${TODRE_EMU_GEN}/relevance.inc)
target_include_directories(test_cuda_kernels_emulated PRIVATE ${TODRE_EMU_GEN}
  ${PROJECT_SOURCE_DIR}/src/cuda ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
set_target_properties(test_cuda_kernels_emulated PROPERTIES CXX_STANDARD 17
                      CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
# ld8() type-puns through uint4, fine on the GPU but not for an optimising
# host compiler with strict aliasing.
target_compile_options(test_cuda_kernels_emulated PRIVATE -fno-strict-aliasing)
target_link_libraries(test_cuda_kernels_emulated PRIVATE todre_cudaemu)
add_test(NAME cuda.kernels_emulated COMMAND test_cuda_kernels_emulated)
set_tests_properties(cuda.kernels_emulated PROPERTIES TIMEOUT 600)

# The whole module for the emulator: every src/cuda/*.cu, host code included.
file(GLOB TODRE_EMU_CU CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/*.cu)
set(TODRE_EMU_MODULE_SOURCES)
foreach(cu ${TODRE_EMU_CU})
  get_filename_component(stem ${cu} NAME_WE)
  set(out ${TODRE_EMU_GEN}/${stem}.cpp)
  add_custom_command(OUTPUT ${out}
    COMMAND ${Python3_EXECUTABLE} ${TODRE_EMU}/emulate_cu.py ${cu} ${out}
    DEPENDS ${cu} ${TODRE_EMU}/emulate_cu.py VERBATIM)
  list(APPEND TODRE_EMU_MODULE_SOURCES ${out})
endforeach()
add_library(todre_cuda_emu MODULE ${TODRE_EMU_MODULE_SOURCES})
target_include_directories(todre_cuda_emu PRIVATE ${PROJECT_SOURCE_DIR}/src/cuda
                           ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(todre_cuda_emu PRIVATE todre_cudaemu)
target_compile_options(todre_cuda_emu PRIVATE -fno-strict-aliasing)
set_target_properties(todre_cuda_emu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
  CXX_EXTENSIONS OFF OUTPUT_NAME todre-cuda-emu PREFIX lib
  CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/emu)
target_link_options(todre_cuda_emu PRIVATE
  "LINKER:--version-script=${PROJECT_SOURCE_DIR}/src/cuda/todre-cuda.map" "LINKER:--no-undefined")

set(TODRE_EMU_ENV ${TODRE_TEST_ENV} "TODRE_CUDA_MODULE=$<TARGET_FILE:todre_cuda_emu>"
    "TODRE_TEST_EMULATED=1")

foreach(feature cuda_parity cuda_contract)
  set(name test_${feature}_emulated)
  add_executable(${name} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_${feature}.c)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src
                             ${CMAKE_CURRENT_SOURCE_DIR}/common)
  target_compile_definitions(${name} PRIVATE TODRE_TEST_HAVE_CUDART=1 TODRE_TEST_EMULATED_RT=1)
  target_link_libraries(${name} PRIVATE todre todre_cudaemu PkgConfig::CMOCKA m)
  if(TARGET todre_testcommon)
    target_link_libraries(${name} PRIVATE todre_testcommon)
  endif()
  add_dependencies(${name} todre_cuda_emu)
  string(REPLACE "cuda_" "" short ${feature})
  add_test(NAME cuda.${short}_emulated COMMAND ${name})
  set_tests_properties(cuda.${short}_emulated PROPERTIES ENVIRONMENT "${TODRE_EMU_ENV}"
                       SKIP_RETURN_CODE 77 TIMEOUT 900)
endforeach()
# Cooperative launches at full device size fail (as under MPS thread limits):
# the matrix-vector path must retry with a smaller grid.
set_property(TEST cuda.parity_emulated APPEND PROPERTY ENVIRONMENT
             "TODRE_EMU_SMS=4" "TODRE_EMU_COOP_SMS=2")
# A machine whose driver sees no GPU: AUTO falls back to the CPU silently,
# explicit CUDA is BACKEND_UNAVAILABLE with the CUDA error text.
add_test(NAME cuda.contract_emulated_nodevice COMMAND test_cuda_contract_emulated)
set_tests_properties(cuda.contract_emulated_nodevice PROPERTIES
  ENVIRONMENT "${TODRE_EMU_ENV};TODRE_EMU_DEVICES=0" SKIP_RETURN_CODE 77 TIMEOUT 300)
