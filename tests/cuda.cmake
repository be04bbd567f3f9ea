# CUDA backend checks (included by tests/CMakeLists.txt).
#
#  - cuda.core_has_no_cuda: libtodre.so has no CUDA / cuBLAS NEEDED entry,
#    so it loads on machines without a GPU or driver.
#  - cuda.module_exports: libtodre-cuda.so exports exactly the backend module
#    entry point, todre_backend_module_register (static cudart and every
#    kernel stay hidden), and links cudart statically.
#  - cuda.no_register_spills: no kernel of libtodre-cuda spills registers on
#    any architecture it is built for (ptxas's report of each object, kept
#    at build time by src/cuda/ptxas_log.sh, read by src/cuda/check_spills.sh).
#  - unit.cuda_parity (tests/unit/test_cuda_parity.c) moves its data with
#    todre_context_alloc / copy / free, as a runtime would, so it needs no
#    toolkit; it reports "skipped" (exit 77) where no usable CUDA device
#    exists. With the toolkit it also links the CUDA runtime, for the one
#    case that hands the context a stream of the caller's.
#  - unit.cuda_contract needs no toolkit at all.
#  - unit.cuda_threads (tests/unit/test_cuda_threads.c): 8 host threads, each
#    with its own context (and its own non-blocking stream, with the
#    toolkit), selecting and probing at the same time; every result equal to
#    the serial run's. Skipped (77) without a usable CUDA device.
# Both run on the real module when it is built (it sits next to libtodre.so,
# where the registry looks). Their runs on the CPU emulator are the
# cuda_emu.host_logic.* tests (tests/cuda_emu.cmake).
find_package(CUDAToolkit QUIET)

# parity and threads link the CUDA runtime where there is one (to hand a
# context a stream of their own); all three run on the module when it is built.
foreach(t test_cuda_parity test_cuda_threads test_cuda_contract)
  if(NOT TARGET ${t})
    continue()
  endif()
  if(CUDAToolkit_FOUND AND NOT t STREQUAL "test_cuda_contract")
    target_link_libraries(${t} PRIVATE CUDA::cudart)
    target_compile_definitions(${t} PRIVATE TODRE_TEST_HAVE_CUDART=1)
  endif()
  if(TARGET todre_cuda)
    add_dependencies(${t} todre_cuda)
    target_compile_definitions(${t} PRIVATE TODRE_TEST_CUDA_MODULE_BUILT=1)
  endif()
endforeach()
if(TARGET test_cuda_threads)
  find_package(Threads REQUIRED)
  target_link_libraries(test_cuda_threads PRIVATE Threads::Threads)
endif()

add_test(NAME cuda.core_has_no_cuda
  COMMAND sh -c "readelf -d \"$1\" > /dev/null || exit 1; if readelf -d \"$1\" | grep NEEDED | grep -Ei 'cuda|cublas|nvrtc|cudnn'; then echo 'libtodre.so must not link CUDA'; exit 1; fi"
          sh $<TARGET_FILE:todre>)
set_tests_properties(cuda.core_has_no_cuda PROPERTIES TIMEOUT 60)

if(TARGET todre_cuda)
  add_test(NAME cuda.module_exports
    COMMAND sh -c "syms=$(nm -D --defined-only \"$1\" | awk '{print $3}' | grep -v '^$' | sort | tr '\\n' ' '); want='todre_backend_module_register '; if [ \"$syms\" != \"$want\" ]; then echo \"exported: [$syms] expected: [$want]\"; exit 1; fi; if readelf -d \"$1\" | grep NEEDED | grep -q 'libcudart'; then echo 'the module must link cudart statically'; exit 1; fi"
            sh $<TARGET_FILE:todre_cuda>)
  set_tests_properties(cuda.module_exports PROPERTIES TIMEOUT 60)
  # Only where ptxas runs at build time: some architecture gets machine code
  # (not only "-virtual" PTX).
  get_target_property(todre_cuda_archs todre_cuda CUDA_ARCHITECTURES)
  set(todre_real_arch FALSE)
  foreach(arch ${todre_cuda_archs})
    if(NOT arch MATCHES "-virtual$")
      set(todre_real_arch TRUE)
    endif()
  endforeach()
  if(todre_real_arch)
    add_test(NAME cuda.no_register_spills
      COMMAND sh ${PROJECT_SOURCE_DIR}/src/cuda/check_spills.sh $<TARGET_OBJECTS:todre_cuda>
      COMMAND_EXPAND_LISTS)
    set_tests_properties(cuda.no_register_spills PROPERTIES TIMEOUT 60)
  endif()
endif()
