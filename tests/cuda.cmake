# CUDA backend checks (included by tests/CMakeLists.txt).
#
#  - cuda.core_has_no_cuda: libtodre.so has no CUDA / cuBLAS NEEDED entry,
#    so it loads on machines without a GPU or driver.
#  - cuda.module_exports: libtodre-cuda.so exports exactly the two backend
#    module entry points (static cudart and every kernel stay hidden).
#  - unit.cuda_parity (tests/unit/test_cuda_parity.c) allocates device copies
#    itself, so it links the CUDA runtime when the toolkit is found; without
#    the toolkit it is built as a stub that reports "skipped" (exit 77).
#  - unit.cuda_contract needs no toolkit at all.
find_package(CUDAToolkit QUIET)

if(TARGET test_cuda_parity)
  if(CUDAToolkit_FOUND)
    target_link_libraries(test_cuda_parity PRIVATE CUDA::cudart)
    target_compile_definitions(test_cuda_parity PRIVATE TODRE_TEST_HAVE_CUDART=1)
  endif()
  if(TARGET todre_cuda)
    add_dependencies(test_cuda_parity todre_cuda)
  endif()
endif()
if(TARGET test_cuda_contract AND TARGET todre_cuda)
  add_dependencies(test_cuda_contract todre_cuda)
endif()

add_test(NAME cuda.core_has_no_cuda
  COMMAND sh -c "readelf -d \"$1\" > /dev/null || exit 1; if readelf -d \"$1\" | grep NEEDED | grep -Ei 'cuda|cublas|nvrtc|cudnn'; then echo 'libtodre.so must not link CUDA'; exit 1; fi"
          sh $<TARGET_FILE:todre>)
set_tests_properties(cuda.core_has_no_cuda PROPERTIES TIMEOUT 60)

if(TARGET todre_cuda)
  add_test(NAME cuda.module_exports
    COMMAND sh -c "syms=$(nm -D --defined-only \"$1\" | awk '{print $3}' | grep -v '^$' | sort | tr '\\n' ' '); want='todre_backend_module_init todre_backend_module_probe '; if [ \"$syms\" != \"$want\" ]; then echo \"exported: [$syms] expected: [$want]\"; exit 1; fi; if readelf -d \"$1\" | grep NEEDED | grep -q 'libcudart'; then echo 'the module must link cudart statically'; exit 1; fi"
            sh $<TARGET_FILE:todre_cuda>)
  set_tests_properties(cuda.module_exports PROPERTIES TIMEOUT 60)
endif()

# cuda.kernels_emulated: the kernels' device code, extracted from the .cu
# sources and run on CPU threads (src/cuda/emu), against float64 references.
# Checks kernel logic on machines without a GPU; needs a C++20 compiler with
# <barrier>. Not a substitute for unit.cuda_parity on a GPU.
include(CheckLanguage)
check_language(CXX)
if(CMAKE_CXX_COMPILER)
  enable_language(CXX)
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-std=c++20 -pthread")
  check_cxx_source_compiles("#include <barrier>
int main() { std::barrier<> b(1); b.arrive_and_wait(); return 0; }" TODRE_HAVE_CXX20_BARRIER)
  unset(CMAKE_REQUIRED_FLAGS)
endif()
if(TODRE_HAVE_CXX20_BARRIER)
  set(TODRE_CUDA_EMU ${PROJECT_SOURCE_DIR}/src/cuda/emu)
  set(TODRE_CUDA_EMU_GEN ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu)
  file(MAKE_DIRECTORY ${TODRE_CUDA_EMU_GEN})
  foreach(part select_kernels relevance)
    add_custom_command(OUTPUT ${TODRE_CUDA_EMU_GEN}/${part}.inc
      COMMAND ${Python3_EXECUTABLE} ${TODRE_CUDA_EMU}/strip_kernels.py
              ${PROJECT_SOURCE_DIR}/src/cuda/${part}.cu ${TODRE_CUDA_EMU_GEN}/${part}.inc
      DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/${part}.cu ${TODRE_CUDA_EMU}/strip_kernels.py
      VERBATIM)
  endforeach()
  add_executable(test_cuda_kernels_emulated ${TODRE_CUDA_EMU}/emu_kernels_test.cpp
                 ${TODRE_CUDA_EMU_GEN}/select_kernels.inc ${TODRE_CUDA_EMU_GEN}/relevance.inc)
  # The fake CUDA headers come first so that they stand in for the real ones.
  target_include_directories(test_cuda_kernels_emulated PRIVATE ${TODRE_CUDA_EMU}/fake
    ${TODRE_CUDA_EMU_GEN} ${PROJECT_SOURCE_DIR}/src/cuda ${PROJECT_SOURCE_DIR}/src
    ${PROJECT_SOURCE_DIR}/include)
  set_target_properties(test_cuda_kernels_emulated PROPERTIES
    CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
  # ld8() type-puns through uint4, fine on the GPU but not for an optimising
  # host compiler with strict aliasing.
  target_compile_options(test_cuda_kernels_emulated PRIVATE -w -fno-strict-aliasing)
  target_link_libraries(test_cuda_kernels_emulated PRIVATE Threads::Threads)
  add_test(NAME cuda.kernels_emulated COMMAND test_cuda_kernels_emulated)
  set_tests_properties(cuda.kernels_emulated PROPERTIES TIMEOUT 600)
endif()
