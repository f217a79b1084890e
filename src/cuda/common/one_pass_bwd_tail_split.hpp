// The tail split of the one-pass backward (tail_split.hpp): the key tiles of a part-full last wave
// are split along their query steps over several CTAs, which meet in the workspace before dK and
// dV are written. Which part of which tile a work item is, and the handshake that adds the parts'
// dK and dV partial sums.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/bwd_params.hpp"

namespace memattn::cuda {

using namespace cute;

// Work item `index` as a key tile (decode_kv_work's index) and the share of its query steps:
// part `part` of `parts` (BwdParams::kv_split_first, tail_split.hpp).
struct KvTilePart {
  std::int64_t tile;
  int part, parts;
};

__device__ __forceinline__ KvTilePart kv_tile_part(const BwdParams& p, std::int64_t index) {
  if (index < p.kv_split_first) return {index, 0, 1};
  const std::int64_t i = index - p.kv_split_first;
  return {p.kv_split_first + i / p.kv_split_parts, int(i % p.kv_split_parts), p.kv_split_parts};
}

// The parts' handshake: a part's sums stored by all its threads, then counted (release at GPU
// scope after the CTA's barrier, as CUTLASS's semaphores do); the last part reads the count with
// acquire before its barrier.
__device__ __forceinline__ void arrive_release(int* count) {
  asm volatile("fence.acq_rel.gpu;\n red.relaxed.gpu.global.add.s32 [%0], 1;" ::"l"(count) : "memory");
}
__device__ __forceinline__ int load_acquire(const int* count) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
  return v;
}

// A split key tile's dK and dV (tail_split.hpp): every part but the last stores its partial sums
// in its slot (16 bytes per thread and access, element e of thread t at e / 4 * kThreads + t) and
// returns false; the last part waits until the others have, adds their sums to its own (in part
// order) and returns true. The kThreads threads that hold the accumulators take part, `tid` this
// one's index among them; `sync` is their barrier.
template <int kThreads, class Acc, class Sync>
__device__ bool gather_split_tile(const BwdParams& p, const KvTilePart& part, Acc& acc_dk, Acc& acc_dv, unsigned tid,
                                  const Sync& sync) {
  constexpr int kVecs = int(decltype(size(acc_dk))::value) / 4;  // float4s per thread and gradient
  static_assert(decltype(size(acc_dk))::value % 4 == 0);
  constexpr std::int64_t kSlotVecs = 2 * kVecs * kThreads;
  const std::int64_t tile = part.tile - p.kv_split_first;
  float4* slots = reinterpret_cast<float4*>(p.kv_split_sums) + tile * (part.parts - 1) * kSlotVecs + tid;
  int* count = p.kv_split_arrivals + tile;
  if (part.part + 1 < part.parts) {
    float4* slot = slots + part.part * kSlotVecs;
    CUTE_UNROLL
    for (int i = 0; i < kVecs; ++i) {
      __stcg(slot + i * kThreads,
             make_float4(acc_dk(4 * i), acc_dk(4 * i + 1), acc_dk(4 * i + 2), acc_dk(4 * i + 3)));
      __stcg(slot + (kVecs + i) * kThreads,
             make_float4(acc_dv(4 * i), acc_dv(4 * i + 1), acc_dv(4 * i + 2), acc_dv(4 * i + 3)));
    }
    sync();
    if (tid == 0) arrive_release(count);
    return false;
  }
  if (tid == 0)
    while (load_acquire(count) < part.parts - 1) __nanosleep(256);
  sync();
  for (int j = 0; j + 1 < part.parts; ++j) {
    const float4* slot = slots + j * kSlotVecs;
    CUTE_UNROLL
    for (int i = 0; i < kVecs; ++i) {
      const float4 dk = __ldcg(slot + i * kThreads), dv = __ldcg(slot + (kVecs + i) * kThreads);
      acc_dk(4 * i) += dk.x, acc_dk(4 * i + 1) += dk.y, acc_dk(4 * i + 2) += dk.z, acc_dk(4 * i + 3) += dk.w;
      acc_dv(4 * i) += dv.x, acc_dv(4 * i + 1) += dv.y, acc_dv(4 * i + 2) += dv.z, acc_dv(4 * i + 3) += dv.w;
    }
  }
  return true;
}

}  // namespace memattn::cuda
