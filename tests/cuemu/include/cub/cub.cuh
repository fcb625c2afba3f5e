/* cuemu (tests/cuemu/include/cuemu.h): cub::DeviceRadixSort::SortPairs on the host, a stable
 * sort by the key bits [begin_bit, end_bit) like CUB's (signed keys ordered as CUB orders them:
 * the sign bit flipped). */
#ifndef CUEMU_CUB_H
#define CUEMU_CUB_H
#include <stdlib.h>
#include <algorithm>
#include <vector>
#include "cuda_runtime.h"

namespace cub {
struct DeviceRadixSort {
    template <typename K, typename V>
    static cudaError_t SortPairs(void *temp, size_t &temp_bytes, const K *keys_in, K *keys_out, const V *vals_in,
                                 V *vals_out, int n, int begin_bit = 0, int end_bit = sizeof(K) * 8,
                                 cudaStream_t = 0, bool = false) {
        if (!temp) { temp_bytes = 16; return cudaSuccess; }
        cuemu::DeviceAccess dev;   /* keys and values are device memory */
        typedef typename std::make_unsigned<K>::type U;
        const U flip = std::is_signed<K>::value ? (U)((U)1 << (sizeof(K) * 8 - 1)) : (U)0;
        auto bits = [&](K k) {
            U u = (U)k ^ flip;
            if (end_bit < (int)(sizeof(K) * 8)) u &= (U)(((U)1 << end_bit) - 1);
            return (U)(u >> begin_bit);
        };
        std::vector<int> order(n);
        for (int i = 0; i < n; i++) order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return bits(keys_in[a]) < bits(keys_in[b]); });
        std::vector<K> ko(n);
        std::vector<V> vo(n);
        for (int i = 0; i < n; i++) { ko[i] = keys_in[order[i]]; vo[i] = vals_in[order[i]]; }
        std::copy(ko.begin(), ko.end(), keys_out);
        std::copy(vo.begin(), vo.end(), vals_out);
        return cudaSuccess;
    }
};
}  // namespace cub
#endif
