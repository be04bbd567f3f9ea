# Python package tests (bindings/python/tests) under pytest, against this
# build's libtodre and CLI, with the package imported from the source tree.
#   python.package : the todre package (NumPy + PyTorch CPU)
#   python.hf      : todre.hf on tiny random LLaVA-NeXT / Qwen2.5-VL models (offline)
# Dependencies: bindings/python/requirements-test.txt. Not registered in
# sanitizer builds: the interpreter is not instrumented, and the C library is
# covered there by the unit tests.
if(TODRE_SANITIZE)
  message(STATUS "python tests: not registered in a sanitizer build")
  return()
endif()

set(_todre_py_dir ${PROJECT_SOURCE_DIR}/bindings/python)
set(_todre_py_env ${TODRE_TEST_ENV}
  "TODRE_LIBRARY=$<TARGET_FILE:todre>"
  "PYTHONPATH=${_todre_py_dir}/src"
  "HF_HUB_OFFLINE=1" "TRANSFORMERS_OFFLINE=1" "TOKENIZERS_PARALLELISM=false"
  "PYTHONDONTWRITEBYTECODE=1")
if(TARGET todre_cli)
  list(APPEND _todre_py_env "TODRE_CLI=$<TARGET_FILE:todre_cli>")
endif()

add_test(NAME python.package
  COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider -rs
          --ignore=${_todre_py_dir}/tests/hf ${_todre_py_dir}/tests
  WORKING_DIRECTORY ${_todre_py_dir})
add_test(NAME python.hf
  COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider -rs ${_todre_py_dir}/tests/hf
  WORKING_DIRECTORY ${_todre_py_dir})
set_tests_properties(python.package python.hf PROPERTIES
  ENVIRONMENT "${_todre_py_env}" TIMEOUT 900)

# The Python examples must keep working: the NumPy quickstart prints the kept
# count the ratio implies (288 of 2880), the HF script runs on its tiny model.
add_test(NAME python.examples
  COMMAND bash -c "set -e; out=$(\"$0\" \"$1/quickstart_numpy.py\"); echo \"$out\"; grep -q '^kept 288 of 2880 tokens' <<<\"$out\"; \"$0\" \"$1/hf_llava_next.py\" --max-new-tokens 4"
          ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/examples/python)
set_tests_properties(python.examples PROPERTIES ENVIRONMENT "${_todre_py_env}" TIMEOUT 300)

# `pip install ./bindings/python` gives an importable package; a libtodre.so.0
# copied into the package before installing is bundled and found first.
# Works on a copy of the sources, so the tree gets no build/ or egg-info.
add_test(NAME python.install
  COMMAND bash -c "set -e; t=$(mktemp -d); trap 'rm -rf $t' EXIT; cp -r \"$1\" $t/src; cp \"$2\" $t/src/src/todre/libtodre.so.0; \"$0\" -m pip install -q --no-deps --no-build-isolation --disable-pip-version-check --target $t/site $t/src; cd $t && env -u TODRE_LIBRARY PYTHONPATH=$t/site \"$0\" -c 'import todre, todre.hf, sys; p = todre.library_path; print(p, todre.version()); sys.exit(0 if p.startswith(sys.argv[1]) else 1)' $t/site"
          ${Python3_EXECUTABLE} ${_todre_py_dir} $<TARGET_FILE:todre>)
set_tests_properties(python.install PROPERTIES ENVIRONMENT "${_todre_py_env}" TIMEOUT 300)
