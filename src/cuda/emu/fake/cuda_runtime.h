// CPU emulation shim for the test cuda.kernels_emulated: just enough of the
// CUDA runtime, intrinsics, cooperative groups and cub::BlockScan to run
// libtodre's kernels with one std::thread per CUDA thread (blocks one at a
// time, or all at once for cooperative kernels). Not a general emulator.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static
typedef int cudaError_t;
typedef void *cudaStream_t;
#define cudaSuccess 0
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
namespace emu {
struct Warp { std::barrier<> bar{32}; uint64_t buf[32]; };
struct Block { std::barrier<> bar; std::atomic<int> acc{0}; std::vector<Warp *> warps;
  Block(int n) : bar(n) { for (int i = 0; i < (n + 31) / 32; i++) warps.push_back(new Warp); }
  ~Block() { for (auto w : warps) delete w; } };
inline thread_local dim3 tIdx, bIdx;
inline thread_local Block *blk;
inline thread_local Warp *wp;
inline dim3 bDim, gDim;
inline std::barrier<> *grid_bar;
}
#define threadIdx (emu::tIdx)
#define blockIdx (emu::bIdx)
#define blockDim (emu::bDim)
#define gridDim (emu::gDim)
inline void __syncthreads() { emu::blk->bar.arrive_and_wait(); }
inline int __syncthreads_or(int p) {
  __syncthreads();
  if (threadIdx.x == 0) emu::blk->acc = 0;
  __syncthreads();
  if (p) emu::blk->acc |= 1;
  __syncthreads();
  int r = emu::blk->acc;
  __syncthreads();
  return r;
}
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int o) {
  int lane = threadIdx.x & 31;
  uint64_t u = 0; memcpy(&u, &v, sizeof v);
  emu::wp->buf[lane] = u;
  emu::wp->bar.arrive_and_wait();
  uint64_t w = emu::wp->buf[lane ^ o];
  emu::wp->bar.arrive_and_wait();
  T r; memcpy(&r, &w, sizeof r); return r;
}
inline int __any_sync(unsigned, int p) {
  int lane = threadIdx.x & 31;
  emu::wp->buf[lane] = p != 0;
  emu::wp->bar.arrive_and_wait();
  int r = 0; for (int i = 0; i < 32; i++) r |= (int)emu::wp->buf[i];
  emu::wp->bar.arrive_and_wait();
  return r;
}
inline int atomicOr(int *p, int v) { return std::atomic_ref<int>(*p).fetch_or(v); }
inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
  std::atomic_ref<unsigned long long> a(*p); unsigned long long old = a.load();
  while (v < old && !a.compare_exchange_weak(old, v)) {}
  return old;
}
template <typename T> inline T __ldcg(const T *p) { return std::atomic_ref<T>(*const_cast<T *>(p)).load(); }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
using std::isfinite;
namespace cooperative_groups {
struct grid_group { void sync() { emu::grid_bar->arrive_and_wait(); } };
inline grid_group this_grid() { return {}; }
}
namespace cub {
template <typename T, int N> struct BlockScan {
  struct TempStorage { T v[N]; };
  TempStorage &ts;
  BlockScan(TempStorage &t) : ts(t) {}
  void ExclusiveSum(T in, T &out, T &total) {
    ts.v[threadIdx.x] = in; __syncthreads();
    T s = 0, a = 0; for (unsigned i = 0; i < blockDim.x; i++) { if (i < threadIdx.x) s += ts.v[i]; a += ts.v[i]; }
    out = s; total = a; __syncthreads();
  }
};
}
namespace emu {
// Run a kernel: cooperative = all blocks at once (grid barrier), else one block at a time.
inline void launch(dim3 g, dim3 b, bool coop, const std::function<void()> &fn) {
  gDim = g; bDim = b;
  int nt = b.x * b.y * b.z;
  auto run_blocks = [&](std::vector<dim3> blocks) {
    std::vector<Block *> bl; for (size_t i = 0; i < blocks.size(); i++) bl.push_back(new Block(nt));
    std::barrier<> gb((int)(blocks.size() * nt)); grid_bar = &gb;
    std::vector<std::thread> th;
    for (size_t i = 0; i < blocks.size(); i++)
      for (int t = 0; t < nt; t++)
        th.emplace_back([&, i, t] { tIdx = dim3(t); bIdx = blocks[i]; blk = bl[i]; wp = bl[i]->warps[t / 32]; fn(); });
    for (auto &x : th) x.join();
    for (auto x : bl) delete x;
  };
  std::vector<dim3> all;
  for (unsigned z = 0; z < g.z; z++) for (unsigned y = 0; y < g.y; y++) for (unsigned x = 0; x < g.x; x++) all.push_back(dim3(x, y, z));
  if (coop) run_blocks(all);
  else for (auto &d : all) run_blocks({d});
}
}
template <class A, class B> inline auto min(A a, B b) -> decltype(a + b) { return a < b ? a : b; }
template <class A, class B> inline auto max(A a, B b) -> decltype(a + b) { return a > b ? a : b; }
