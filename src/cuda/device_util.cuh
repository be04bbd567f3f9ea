/* Device helpers shared by the CUDA kernels: element loads for the three
 * input dtypes, order-preserving argmin keys (ties -> lowest index), and
 * warp / block reductions. */
#ifndef TODRE_SRC_CUDA_DEVICE_UTIL_CUH
#define TODRE_SRC_CUDA_DEVICE_UTIL_CUH

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../backend.h"

namespace todre_cuda {

/* ---- loads -------------------------------------------------------------- */

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ float ld(const T *p, int64_t i)
{
    return to_f32(p[i]);
}

/* Eight consecutive elements starting at p (16-byte aligned for 2-byte types,
 * 32-byte for float; the host only takes this path when that holds). */
__device__ __forceinline__ void ld8(const float *p, float v[8])
{
    float4 a = *reinterpret_cast<const float4 *>(p);
    float4 b = *reinterpret_cast<const float4 *>(p + 4);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ __forceinline__ void ld8(const __half *p, float v[8])
{
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = __half22float2(h[i]);
        v[2 * i] = f.x;
        v[2 * i + 1] = f.y;
    }
}
__device__ __forceinline__ void ld8(const __nv_bfloat16 *p, float v[8])
{
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = __bfloat1622float2(h[i]);
        v[2 * i] = f.x;
        v[2 * i + 1] = f.y;
    }
}

/* ---- argmin keys ---------------------------------------------------------- */

/* Monotone map float -> uint32 (larger float, larger key). -0 and +0 map to
 * the same key so that they tie, as they compare equal on the CPU. NaN of
 * either sign sorts after +inf, so it never wins an argmin or an argmax
 * (argmax negates its values). */
__device__ __forceinline__ uint32_t ord_f32(float f)
{
    if (isnan(f)) return 0xfffffffeu;
    f = f + 0.0f; /* -0 -> +0 */
    uint32_t b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* Key whose minimum is the smallest value, ties -> smallest index. */
__device__ __forceinline__ unsigned long long argmin_key(float value, uint32_t index)
{
    return ((unsigned long long)ord_f32(value) << 32) | (unsigned long long)index;
}
__device__ __forceinline__ uint32_t key_index(unsigned long long key)
{
    return (uint32_t)(key & 0xffffffffull);
}

#define TODRE_KEY_NONE 0xffffffffffffffffull

/* ---- reductions ------------------------------------------------------------ */

__device__ __forceinline__ unsigned long long warp_min_u64(unsigned long long v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w < v ? w : v;
    }
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Block-wide minimum of a u64 key, returned to every thread. @p scratch has
 * 33 entries in shared memory. Contains two __syncthreads(). */
__device__ __forceinline__ unsigned long long block_min_u64(unsigned long long v,
                                                            unsigned long long *scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int nwarps = (blockDim.x + 31) >> 5;
    v = warp_min_u64(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        unsigned long long w = lane < nwarps ? scratch[lane] : TODRE_KEY_NONE;
        w = warp_min_u64(w);
        if (lane == 0) scratch[32] = w;
    }
    __syncthreads();
    return scratch[32];
}

/* Block-wide sum in double with a fixed reduction tree (deterministic).
 * @p scratch has 33 entries in shared memory; the result is valid in
 * thread 0 only. */
__device__ __forceinline__ double block_sum_d(double v, double *scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int nwarps = (blockDim.x + 31) >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    double total = 0.0;
    if (warp == 0) {
        total = lane < nwarps ? scratch[lane] : 0.0;
        total = warp_sum_d(total);
    }
    return total;
}

} /* namespace todre_cuda */

#endif /* TODRE_SRC_CUDA_DEVICE_UTIL_CUH */
