// Emulation stand-in for cub::BlockScan (exclusive sum only).
#pragma once
#include "../../cuda_runtime.h"
namespace cub {
template <typename T, int N> struct BlockScan {
  struct TempStorage { T v[N]; };
  TempStorage &ts;
  BlockScan(TempStorage &t) : ts(t) {}
  void ExclusiveSum(T in, T &out, T &total) {
    ts.v[threadIdx.x] = in;
    __syncthreads();
    T s = 0, a = 0;
    for (unsigned i = 0; i < blockDim.x; i++) { if (i < threadIdx.x) s += ts.v[i]; a += ts.v[i]; }
    out = s;
    total = a;
    __syncthreads();
  }
};
}  // namespace cub
