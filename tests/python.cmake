# Python package tests (bindings/python/tests) under pytest, against this
# build's libtodre (its SONAME file, libtodre.so.1) and CLI, with the package
# imported from the source tree.
#   python.package : the todre package (NumPy + PyTorch CPU), including
#                    test_header.py: the package's ctypes declarations equal
#                    include/todre/todre.h (with this build's generated
#                    include/todre/todre_version.h)
#   python.hf      : todre.hf on tiny random LLaVA-NeXT / Qwen2.5-VL models (offline)
# (tests/vllm needs vLLM's own environment: scripts/test_vllm.sh runs it.)
#   python.device_emu : the package's device paths (module backend registry,
#                    contexts, todre_context_copy, stage 2 on device arrays)
#                    on the CUDA module built for the CPU emulator
#                    (tests/cuda_emu.cmake), when that is built
# Dependencies: bindings/python/requirements-test.txt. In sanitizer builds
# only python.threads_asan is registered (below): the interpreter is not
# instrumented, and the C library is covered there by the unit tests.

set(_todre_py_dir ${PROJECT_SOURCE_DIR}/bindings/python)
set(_todre_py_env ${TODRE_TEST_ENV}
  "TODRE_LIBRARY=$<TARGET_SONAME_FILE:todre>"
  "TODRE_BUILD_INCLUDE_DIR=${PROJECT_BINARY_DIR}/include"
  "PYTHONPATH=${_todre_py_dir}/src"
  "HF_HUB_OFFLINE=1" "TRANSFORMERS_OFFLINE=1" "TOKENIZERS_PARALLELISM=false"
  "PYTHONDONTWRITEBYTECODE=1")

if(TODRE_SANITIZE)
  #   python.threads_asan : the package's and todre.hf's thread tests against
  #                    this build's AddressSanitizer-instrumented libtodre,
  #                    with gcc's ASan runtime (and libstdc++, whose
  #                    __cxa_throw it intercepts) preloaded into the
  #                    interpreter: Python threads sharing contexts and
  #                    models must not touch freed or foreign memory in the
  #                    library. Leak checking is off (the interpreter's own
  #                    allocations outlive it by design).
  if(TODRE_SANITIZE MATCHES "address" AND CMAKE_C_COMPILER_ID STREQUAL "GNU")
    execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                    OUTPUT_VARIABLE _todre_asan_rt OUTPUT_STRIP_TRAILING_WHITESPACE)
    execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libstdc++.so.6
                    OUTPUT_VARIABLE _todre_stdcxx OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(IS_ABSOLUTE "${_todre_asan_rt}" AND IS_ABSOLUTE "${_todre_stdcxx}")
      add_test(NAME python.threads_asan
        COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider -rs
                ${_todre_py_dir}/tests/test_context.py ${_todre_py_dir}/tests/hf/test_threads.py
        WORKING_DIRECTORY ${_todre_py_dir})
      set_tests_properties(python.threads_asan PROPERTIES
        ENVIRONMENT "${_todre_py_env};LD_PRELOAD=${_todre_asan_rt} ${_todre_stdcxx};ASAN_OPTIONS=detect_leaks=0:halt_on_error=1;UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1"
        TIMEOUT 900)
    endif()
  endif()
  message(STATUS "python tests: only python.threads_asan in a sanitizer build")
  return()
endif()
if(TARGET todre_cli)
  list(APPEND _todre_py_env "TODRE_CLI=$<TARGET_FILE:todre_cli>")
endif()

add_test(NAME python.package
  COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider -rs
          --ignore=${_todre_py_dir}/tests/hf --ignore=${_todre_py_dir}/tests/vllm
          ${_todre_py_dir}/tests
  WORKING_DIRECTORY ${_todre_py_dir})
add_test(NAME python.hf
  COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider -rs ${_todre_py_dir}/tests/hf
  WORKING_DIRECTORY ${_todre_py_dir})
set_tests_properties(python.package python.hf PROPERTIES
  ENVIRONMENT "${_todre_py_env}" TIMEOUT 900)

# The registry is scanned once per process, so the emulated module is named in
# the environment of a process of its own; only test_device_emu.py runs there
# (it imports no PyTorch: a CUDA runtime loaded first would take the module's
# CUDA symbols).
if(TARGET todre_cuda_emu)
  add_test(NAME python.device_emu
    COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider -rs
            ${_todre_py_dir}/tests/test_device_emu.py
    WORKING_DIRECTORY ${_todre_py_dir})
  set_tests_properties(python.device_emu PROPERTIES
    ENVIRONMENT "${_todre_py_env};TODRE_BACKEND_PATH=$<TARGET_FILE:todre_cuda_emu>;TODRE_TEST_EMULATED=1"
    TIMEOUT 300)
endif()

# The Python examples must keep working: the NumPy quickstart prints the kept
# count the ratio implies (288 of 2880), the HF script runs on its tiny model.
add_test(NAME python.examples
  COMMAND bash -c "set -e; out=$(\"$0\" \"$1/quickstart_numpy.py\"); echo \"$out\"; grep -q '^kept 288 of 2880 tokens' <<<\"$out\"; \"$0\" \"$1/hf_llava_next.py\" --max-new-tokens 4"
          ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/examples/python)
set_tests_properties(python.examples PROPERTIES ENVIRONMENT "${_todre_py_env}" TIMEOUT 300)

# The package as users install it (pip install . -> wheel -> fresh venv) is
# tested by scripts/test_wheel.sh, a stage of scripts/test.sh.
