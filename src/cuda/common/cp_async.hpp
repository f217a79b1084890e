// 16-byte copies from global to shared memory that bypass L1 (cp.async.cg): the bias tiles
// (bias_tile.hpp) and the decoding kernel's K/V ring (sm80/decode/kernel.hpp). The caller commits
// and waits for them (cute::cp_async_fence, cp_async_wait).
#pragma once

namespace memattn::cuda {

// 16 bytes, of which the first src_bytes are read and the rest zeroed.
__device__ __forceinline__ void cp_async_zfill16(void* smem_dst, const void* gmem_src, int src_bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src));
}

}  // namespace memattn::cuda
