# Host-logic tests of the CUDA backend on a CPU emulator of CUDA
# (tests/cuda_emu), on any Linux machine: no GPU, driver or nvcc needed.
#
# WHAT THEY PROVE, AND WHAT THEY DO NOT. These tests check the module's host
# logic (planning, staging, streams, workspace reuse, error and NaN
# reporting, the registry entry point, memory functions) and the kernels'
# arithmetic, indexing and barriers, by running the CUDA sources on a CPU
# emulator. They do NOT show that the kernels run on a GPU: the emulator
# cannot see the GPU memory model, real warp scheduling, cross-stream races,
# per-architecture resource limits or speed. unit.cuda_parity and
# unit.cuda_contract on a machine with a GPU are the checks for those.
#
# The emulator runs each CUDA thread as a fiber and implements the runtime,
# cuBLAS and CUB calls the module makes with their documented semantics and
# contract checks (device vs host pointers, launch limits, shared-memory
# opt-in, operands inside their allocations, work that runs only when the
# host waits). See docs/cuda.md, "The CPU emulator".
#
# Build: ONE translation of each src/cuda/*.cu (emulate_cu.py rewrites the
# <<<>>> launches, cooperative launches and dynamic shared memory, nothing
# else) compiled once into the object library todre_cuda_emu_objs, which both
# the emulated module and the kernels test link.
#
#  - cuda_emu.host_logic.kernels: the kernels through their launchers
#    against float64 references, threads resumed in ascending and then
#    descending order (tests/cuda_emu/kernels_test.cpp).
#  - cuda_emu.host_logic.module: tests/unit/test_cuda_parity.c against the
#    emulated module (libtodre-cuda-emu.so, registered as "cuda" through
#    TODRE_BACKEND_PATH), plus the emulator's counters: no allocation and no
#    host wait on the hot path, no contract violation.
#  - cuda_emu.host_logic.contract: tests/unit/test_cuda_contract.c with an
#    emulated device (registry and device properties, host memory given to a
#    CUDA context, graph capture refused, availability queries that create
#    nothing, memory functions, workspace release, the GRAM size limit from
#    shared memory); _nodevice with a driver that sees no GPU, _oldgpu with a
#    compute capability 7.0 device (both: "cuda" registered, not available,
#    with the reason).
option(TODRE_CUDA_EMU "Build the CUDA emulator and its cuda_emu.* tests" ON)
if(NOT TODRE_CUDA_EMU)
  return()
endif()
include(CheckIncludeFile)
find_package(Threads REQUIRED)
check_include_file(ucontext.h TODRE_HAVE_UCONTEXT)
include(CheckLanguage)
check_language(CXX)
if(NOT TODRE_HAVE_UCONTEXT OR NOT CMAKE_CXX_COMPILER)
  message(STATUS "libtodre: no ucontext.h or C++ compiler, the CUDA emulator tests are not built")
  return()
endif()
enable_language(CXX)

set(TODRE_EMU ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emu)
set(TODRE_EMU_GEN ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu_gen)
file(MAKE_DIRECTORY ${TODRE_EMU_GEN})

# The emulated runtime, cuBLAS and CUB: one shared library, so that a test
# and the dlopen()ed module see the same allocations, queue and counters.
add_library(todre_cudaemu SHARED ${TODRE_EMU}/rt/emu_rt.cpp ${TODRE_EMU}/rt/cublas_emu.cpp)
target_include_directories(todre_cudaemu PUBLIC ${TODRE_EMU}/fake
                           PRIVATE ${PROJECT_SOURCE_DIR}/src)
set_target_properties(todre_cudaemu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
                      CXX_EXTENSIONS OFF LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/emu)

# One translation of every src/cuda/*.cu, host code included.
file(GLOB TODRE_EMU_CU CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/*.cu)
set(TODRE_EMU_SOURCES)
foreach(cu ${TODRE_EMU_CU})
  get_filename_component(stem ${cu} NAME_WE)
  set(out ${TODRE_EMU_GEN}/${stem}.cpp)
  add_custom_command(OUTPUT ${out}
    COMMAND ${Python3_EXECUTABLE} ${TODRE_EMU}/emulate_cu.py ${cu} ${out}
    DEPENDS ${cu} ${TODRE_EMU}/emulate_cu.py VERBATIM)
  list(APPEND TODRE_EMU_SOURCES ${out})
endforeach()
add_library(todre_cuda_emu_objs OBJECT ${TODRE_EMU_SOURCES})
target_include_directories(todre_cuda_emu_objs PUBLIC ${PROJECT_SOURCE_DIR}/src/cuda
  ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/include)
target_link_libraries(todre_cuda_emu_objs PUBLIC todre_cudaemu)
# ld8() type-puns through uint4, fine on the GPU but not for an optimising
# host compiler with strict aliasing.
target_compile_options(todre_cuda_emu_objs PUBLIC -fno-strict-aliasing)
set_target_properties(todre_cuda_emu_objs PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
  CXX_EXTENSIONS OFF POSITION_INDEPENDENT_CODE ON
  CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)

# The emulated module: exports only todre_backend_module_register, like
# libtodre-cuda.so, and registers as "cuda" whatever its file name.
add_library(todre_cuda_emu MODULE $<TARGET_OBJECTS:todre_cuda_emu_objs>)
target_link_libraries(todre_cuda_emu PRIVATE todre_cudaemu Threads::Threads)
set_target_properties(todre_cuda_emu PROPERTIES OUTPUT_NAME todre-cuda-emu PREFIX lib
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/emu
  LINK_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/todre-cuda.map)
target_link_options(todre_cuda_emu PRIVATE
  "LINKER:--version-script=${PROJECT_SOURCE_DIR}/src/cuda/todre-cuda.map" "LINKER:--no-undefined")

# The kernels, from the same objects.
add_executable(test_cuda_emu_kernels ${TODRE_EMU}/kernels_test.cpp)
target_link_libraries(test_cuda_emu_kernels PRIVATE todre_cuda_emu_objs)
set_target_properties(test_cuda_emu_kernels PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
                      CXX_EXTENSIONS OFF)
add_test(NAME cuda_emu.host_logic.kernels COMMAND test_cuda_emu_kernels)
set_tests_properties(cuda_emu.host_logic.kernels PROPERTIES TIMEOUT 600)

# The public API against the emulated module: the registry loads exactly the
# file TODRE_BACKEND_PATH names.
set(TODRE_EMU_ENV ${TODRE_TEST_ENV} "TODRE_BACKEND_PATH=$<TARGET_FILE:todre_cuda_emu>"
    "TODRE_TEST_EMULATED=1")
foreach(feature cuda_parity cuda_contract)
  set(name test_${feature}_emu)
  add_executable(${name} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_${feature}.c)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src
                             ${CMAKE_CURRENT_SOURCE_DIR}/common)
  target_compile_definitions(${name} PRIVATE TODRE_TEST_HAVE_CUDART=1 TODRE_TEST_EMULATED_RT=1
                             TODRE_TEST_CUDA_MODULE_BUILT=1)
  target_link_libraries(${name} PRIVATE todre todre_cudaemu PkgConfig::CMOCKA m Threads::Threads)
  if(TARGET todre_testcommon)
    target_link_libraries(${name} PRIVATE todre_testcommon)
  endif()
  add_dependencies(${name} todre_cuda_emu)
endforeach()

add_test(NAME cuda_emu.host_logic.module COMMAND test_cuda_parity_emu)
# Cooperative launches at full device size fail (as under MPS thread limits):
# the GEMV strategy must retry with a smaller grid.
set_tests_properties(cuda_emu.host_logic.module PROPERTIES
  ENVIRONMENT "${TODRE_EMU_ENV};TODRE_EMU_SMS=4;TODRE_EMU_COOP_SMS=2" TIMEOUT 900)

add_test(NAME cuda_emu.host_logic.contract COMMAND test_cuda_contract_emu)
set_tests_properties(cuda_emu.host_logic.contract PROPERTIES
  ENVIRONMENT "${TODRE_EMU_ENV}" TIMEOUT 300)
# A driver that sees no GPU: "cuda" is registered but not available, with the
# CUDA error text; AUTO falls back to the CPU silently.
add_test(NAME cuda_emu.host_logic.contract_nodevice COMMAND test_cuda_contract_emu)
set_tests_properties(cuda_emu.host_logic.contract_nodevice PROPERTIES
  ENVIRONMENT "${TODRE_EMU_ENV};TODRE_EMU_DEVICES=0;TODRE_TEST_EXPECT_REASON=no CUDA-capable device"
  TIMEOUT 300)
# Only a compute capability 7.0 device: not available, the reason says why.
add_test(NAME cuda_emu.host_logic.contract_oldgpu COMMAND test_cuda_contract_emu)
set_tests_properties(cuda_emu.host_logic.contract_oldgpu PROPERTIES
  ENVIRONMENT "${TODRE_EMU_ENV};TODRE_EMU_CC_MAJOR=7;TODRE_TEST_EXPECT_REASON=compute capability 7.0"
  TIMEOUT 300)
# A driver older than the CUDA 13 runtime (cudaErrorInsufficientDriver): the
# reason names the driver the module needs, and `todre info` prints it.
set(TODRE_EMU_OLD_DRIVER "TODRE_EMU_DRIVER_VERSION=12080")
add_test(NAME cuda_emu.host_logic.contract_olddriver COMMAND test_cuda_contract_emu)
set_tests_properties(cuda_emu.host_logic.contract_olddriver PROPERTIES
  ENVIRONMENT "${TODRE_EMU_ENV};${TODRE_EMU_OLD_DRIVER};TODRE_TEST_EXPECT_REASON=driver R580 or newer"
  TIMEOUT 300)
if(TARGET todre_cli)
  add_test(NAME cuda_emu.host_logic.info_olddriver COMMAND $<TARGET_FILE:todre_cli> info)
  set_tests_properties(cuda_emu.host_logic.info_olddriver PROPERTIES
    ENVIRONMENT "${TODRE_EMU_ENV};${TODRE_EMU_OLD_DRIVER}"
    PASS_REGULAR_EXPRESSION "backend cuda: unavailable \\([^\n]*the CUDA driver is older than this module needs \\(CUDA 13 runtime: driver R580 or newer\\)"
    TIMEOUT 60)
endif()
