# The .npy reader/writer as a static library `todre_npy` (position-independent,
# so shared objects such as test helpers may link it). Included from
# tools/todre/CMakeLists.txt and, when the CLI is not built, from tests/CMakeLists.txt.
if(NOT TARGET todre_npy)
  add_library(todre_npy STATIC ${CMAKE_CURRENT_LIST_DIR}/npy.c)
  target_include_directories(todre_npy PUBLIC ${CMAKE_CURRENT_LIST_DIR})
  set_target_properties(todre_npy PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(TODRE_WARNINGS)
    target_compile_options(todre_npy PRIVATE ${TODRE_WARNINGS})
  endif()
endif()
