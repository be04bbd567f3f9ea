// Emulation stand-in for cub::DeviceSegmentedSort::SortKeys: the documented
// two-phase protocol (a NULL temporary buffer asks for its size), ascending
// stable sort of each segment [begin[i], end[i]), queued on the stream.
#pragma once
#include <algorithm>
#include "../../cuda_runtime.h"
namespace cub {
struct DeviceSegmentedSort {
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
