// CPU emulation of the CUDA runtime and device intrinsics, for tests only.
//
// Each CUDA thread is a fiber (ucontext) on the calling OS thread, so the
// emulator is deterministic and barriers are cheap. Blocks run one after the
// other; a cooperative launch runs all its blocks together so that
// grid.sync() works. Barriers are strict: __syncthreads(), warp shuffles and
// grid.sync() must be reached by every thread of their scope, or the launch
// fails with a "barrier deadlock" report (a hang or undefined behaviour on a
// GPU). __shared__ variables are function statics (one block at a time);
// dynamic shared memory is a heap buffer of exactly the launch's size, so a
// sanitizer build sees overruns.
//
// Host API: cuda_runtime_api.h. Implementation: ../rt/emu_rt.cpp.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <atomic>
#include <cfloat>

#include "cuda_runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };

namespace emu {
struct ThreadState {
  dim3 tid, bid;
  int lin;  // linear thread index in the block
};
extern ThreadState *g_thread;  // the running CUDA thread
extern dim3 g_block_dim, g_grid_dim;

void block_sync();
int block_sync_or(int p);
uint64_t warp_xor_exchange(uint64_t v, int lane_mask);
int warp_any(int p);
void grid_sync();
void *dyn_smem();

struct Cfg { dim3 g, b; size_t smem; cudaStream_t s; };
inline Cfg cfg(dim3 g, dim3 b, size_t smem = 0, cudaStream_t s = nullptr) { return {g, b, smem, s}; }

// Validates the configuration now (errors go to cudaGetLastError()), then
// queues the kernel on the stream.
cudaError_t launch_erased(const void *kernel, Cfg c, bool coop, std::function<void()> body);
// Queues host-side work (cuBLAS, CUB) on a stream.
cudaError_t enqueue(cudaStream_t s, std::function<void()> op);
// Reports a contract breach (stderr, counted in todre_emu_counters).
void violation(const char *fmt, ...);
// Device allocation containing [p, p + bytes), or false.
bool device_range(const void *p, size_t bytes);
void count_blas();
// The context a runtime call runs in (binds the primary context of the
// thread's device when none is current); opaque to callers.
void *bind_ctx_opaque();
void count_blas_handle();
void set_func_attr(const void *kernel, int attr, int value, cudaError_t *err);
int blocks_per_sm(int threads, size_t smem);

// Kernel arguments are converted to the parameter types and copied at
// launch, as CUDA does.
template <class... P, class... A>
inline void launch_kernel(void (*k)(P...), Cfg c, A &&...a) {
  std::tuple<std::decay_t<P>...> args(std::forward<A>(a)...);
  launch_erased(reinterpret_cast<const void *>(k), c, false, [k, args]() { std::apply(k, args); });
}

// Order in which runnable threads are resumed: 0 ascending, 1 descending
// (cuda_emu.host_logic.kernels runs both).
void set_order(int order);
}  // namespace emu

#define threadIdx (emu::g_thread->tid)
#define blockIdx (emu::g_thread->bid)
#define blockDim (emu::g_block_dim)
#define gridDim (emu::g_grid_dim)

inline void __syncthreads() { emu::block_sync(); }
inline int __syncthreads_or(int p) { return emu::block_sync_or(p); }
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 64 bits");
  uint64_t u = 0;
  memcpy(&u, &v, sizeof v);
  u = emu::warp_xor_exchange(u, lane_mask);
  T r;
  memcpy(&r, &u, sizeof r);
  return r;
}
inline int __any_sync(unsigned, int p) { return emu::warp_any(p); }
// One OS thread runs every fiber, and a fiber is never preempted: plain
// read-modify-write is atomic here.
inline int atomicOr(int *p, int v) { int o = *p; *p = o | v; return o; }
inline int atomicAdd(int *p, int v) { int o = *p; *p = o + v; return o; }
inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
  unsigned long long o = *p; if (v < o) *p = v; return o;
}
template <typename T> inline T __ldcg(const T *p) { return *p; }
// Round-to-nearest, never contracted into an FMA (as their CUDA namesakes).
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
using std::isfinite;
using std::isnan;

namespace cooperative_groups {
struct grid_group { void sync() { emu::grid_sync(); } };
inline grid_group this_grid() { return {}; }
}  // namespace cooperative_groups

template <class... P>
inline cudaError_t cudaFuncSetAttribute(void (*k)(P...), enum cudaFuncAttribute attr, int value) {
  cudaError_t err = cudaSuccess;
  emu::set_func_attr(reinterpret_cast<const void *>(k), (int)attr, value, &err);
  return err;
}
template <class... P>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void (*)(P...), int threads,
                                                                 size_t smem) {
  *n = emu::blocks_per_sm(threads, smem);
  return cudaSuccess;
}
namespace emu {
template <class... P, size_t... I>
inline std::tuple<std::decay_t<P>...> unpack(void **a, std::index_sequence<I...>) {
  return std::tuple<std::decay_t<P>...>(*static_cast<std::decay_t<P> *>(a[I])...);
}
}  // namespace emu
template <class... P>
inline cudaError_t cudaLaunchCooperativeKernel(void (*k)(P...), dim3 g, dim3 b, void **args,
                                               size_t smem, cudaStream_t s) {
  auto t = emu::unpack<P...>(args, std::index_sequence_for<P...>{});
  return emu::launch_erased(reinterpret_cast<const void *>(k), emu::cfg(g, b, smem, s), true,
                            [k, t]() { std::apply(k, t); });
}

template <class A, class B> inline auto min(A a, B b) -> decltype(a + b) { return a < b ? a : b; }
template <class A, class B> inline auto max(A a, B b) -> decltype(a + b) { return a > b ? a : b; }
