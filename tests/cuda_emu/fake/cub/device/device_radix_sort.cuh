// Emulation stand-in for cub::DeviceRadixSort::SortPairs: the documented
// two-phase protocol (a NULL temporary buffer asks for its size), a stable
// ascending sort of the pairs by the key bits [begin_bit, end_bit), queued
// on the stream. Like CUB it never makes the host wait.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <vector>
#include "../../cuda_runtime.h"
namespace cub {
struct DeviceRadixSort {
  template <typename K, typename V, typename NumItemsT>
  static cudaError_t SortPairs(void *tmp, size_t &tmp_bytes, const K *keys_in, K *keys_out,
                               const V *values_in, V *values_out, NumItemsT num_items,
                               int begin_bit = 0, int end_bit = sizeof(K) * 8,
                               cudaStream_t stream = nullptr) {
    static_assert(std::is_unsigned<K>::value, "the emulator sorts unsigned integer keys");
    const int64_t n = (int64_t)num_items;
    size_t need = 256 + (size_t)(n > 0 ? n : 0) * 8;
    if (!tmp) { tmp_bytes = need; return cudaSuccess; }
    if (tmp_bytes < need || !emu::device_range(tmp, need)) {
      emu::violation("cub::DeviceRadixSort::SortPairs: temporary storage of %zu bytes, %zu needed",
                     tmp_bytes, need);
      return cudaErrorInvalidValue;
    }
    if (begin_bit < 0 || end_bit > (int)sizeof(K) * 8 || begin_bit > end_bit) {
      emu::violation("cub::DeviceRadixSort::SortPairs: bits [%d, %d) of a %zu-bit key", begin_bit,
                     end_bit, sizeof(K) * 8);
      return cudaErrorInvalidValue;
    }
    if (n > 0 && (!emu::device_range(keys_in, sizeof(K) * n) ||
                  !emu::device_range(keys_out, sizeof(K) * n) ||
                  !emu::device_range(values_in, sizeof(V) * n) ||
                  !emu::device_range(values_out, sizeof(V) * n))) {
      emu::violation("cub::DeviceRadixSort::SortPairs: keys or values are not %lld items of device "
                     "memory", (long long)n);
      return cudaErrorInvalidValue;
    }
    return emu::enqueue(stream, [=]() {
      K mask = end_bit - begin_bit >= (int)sizeof(K) * 8
                   ? ~K(0)
                   : (K)(((K(1) << (end_bit - begin_bit)) - 1) << begin_bit);
      std::vector<int64_t> order((size_t)n);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return (keys_in[a] & mask) < (keys_in[b] & mask);
      });
      std::vector<K> k((size_t)n);
      std::vector<V> v((size_t)n);
      for (int64_t i = 0; i < n; i++) {
        k[i] = keys_in[order[i]];
        v[i] = values_in[order[i]];
      }
      std::copy(k.begin(), k.end(), keys_out);
      std::copy(v.begin(), v.end(), values_out);
    });
  }
};
}  // namespace cub
