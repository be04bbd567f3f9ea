# bench_relevance times one attention layer with OpenBLAS (and OpenMP for its
# softmax) next to the stage-2 paths, so it links both directly.
if(TARGET bench_relevance)
  target_link_libraries(bench_relevance PRIVATE PkgConfig::OPENBLAS OpenMP::OpenMP_C)
endif()
