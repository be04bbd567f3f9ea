// Emulation stand-in for cub::DeviceSegmentedSort::SortKeys: the documented
// two-phase protocol (a NULL temporary buffer asks for its size), ascending
// stable sort of each segment [begin[i], end[i]), queued on the stream.
//
// Like CUB (dispatch_segmented_sort.cuh, CUDA 12 and 13), a call with more
// segments than the partitioning threshold (500 for sm_60 and newer) and no
// CUDA dynamic parallelism partitions the segments on the device, copies the
// group sizes into pageable host memory and synchronises the stream: a host
// wait in the middle of the call, which fails under graph capture. The
// emulator does the same (a device-to-host copy into a local variable, then
// cudaStreamSynchronize), so its counters see the wait.
#pragma once
#include <algorithm>
#include "../../cuda_runtime.h"
namespace cub {
struct DeviceSegmentedSort {
  static constexpr int64_t kPartitioningThreshold = 500;
  template <typename K, typename BeginIt, typename EndIt>
  static cudaError_t SortKeys(void *tmp, size_t &tmp_bytes, const K *in, K *out, int64_t num_items,
                              int64_t num_segments, BeginIt begin, EndIt end,
                              cudaStream_t stream = nullptr) {
    size_t need = 256 + (size_t)num_segments * 16;
    if (!tmp) { tmp_bytes = need; return cudaSuccess; }
    if (tmp_bytes < need || !emu::device_range(tmp, need)) {
      emu::violation("cub::DeviceSegmentedSort::SortKeys: temporary storage of %zu bytes, %zu needed",
                     tmp_bytes, need);
      return cudaErrorInvalidValue;
    }
    if (num_items > 0 && (!emu::device_range(in, sizeof(K) * num_items) ||
                          !emu::device_range(out, sizeof(K) * num_items))) {
      emu::violation("cub::DeviceSegmentedSort::SortKeys: keys are not %lld items of device memory",
                     (long long)num_items);
      return cudaErrorInvalidValue;
    }
    if (num_segments > kPartitioningThreshold) {
      // Partition (large / small segments) on the device, then read the
      // group sizes on the host.
      int64_t *d_sizes = (int64_t *)tmp;
      cudaError_t e = emu::enqueue(stream, [=]() { d_sizes[0] = num_segments; d_sizes[1] = 0; });
      int64_t h_sizes[2];
      if (e == cudaSuccess)
        e = cudaMemcpyAsync(h_sizes, d_sizes, sizeof h_sizes, cudaMemcpyDeviceToHost, stream);
      if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
      if (e != cudaSuccess) return e;
    }
    return emu::enqueue(stream, [=]() {
      for (int64_t i = 0; i < num_segments; i++) {
        int64_t b = begin[i], e = end[i];
        if (b < 0 || e > num_items || b > e) {
          emu::violation("cub::DeviceSegmentedSort::SortKeys: segment %lld is [%lld, %lld) of %lld items",
                         (long long)i, (long long)b, (long long)e, (long long)num_items);
          continue;
        }
        std::copy(in + b, in + e, out + b);
        std::stable_sort(out + b, out + e);
      }
    });
  }
};
}  // namespace cub
