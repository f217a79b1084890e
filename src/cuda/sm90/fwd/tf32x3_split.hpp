// The fp32 Hopper forward's operand splitting (tf32x3_traits.hpp): each fp32 value x becomes its
// TF32 big part (x rounded to TF32, written where x was) and small part (x - big rounded to TF32,
// written at the same offset of a second buffer), as common/tf32x3.hpp's split_tf32 does in
// registers, so that the products are the mma.sync rows' bit for bit.
//
// The split warpgroup walks the work items the producer hands out and, for each key tile as it
// lands, splits K in place and rewrites V as V^T (keys contiguous, the layout TF32 wgmma reads),
// then signals the consumers (k_split, v_split). V^T's keys go in the order P's registers hold
// them: P reuses the scores' accumulator as the A operand of P V, and the accumulator holds keys
// 2t, 2t + 1 of each 8 where the A operand wants keys t, t + 4 (tf32x3.hpp), so column j of V^T
// holds key key_of_column(j).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "cuda/common/tf32x3.hpp"
#include "cuda/sm90/fwd/tf32x3_storage.hpp"
#include "cuda/sm90/fwd/work_items.hpp"
#include "cuda/sm90/pipeline.hpp"

namespace memattn::cuda::sm90 {

using namespace cute;

__device__ __forceinline__ float tf32_big(float x) { return __uint_as_float(round_to_tf32(x)); }
__device__ __forceinline__ float tf32_small(float x, float big) { return __uint_as_float(round_to_tf32(x - big)); }

// Splits 16 bytes: big parts into *big (where x was read), small parts into *small.
__device__ __forceinline__ void split_vector(float4 x, float4* big, float4* small) {
  const float4 b{tf32_big(x.x), tf32_big(x.y), tf32_big(x.z), tf32_big(x.w)};
  *big = b;
  *small = float4{tf32_small(x.x, b.x), tf32_small(x.y, b.y), tf32_small(x.z, b.z), tf32_small(x.w, b.w)};
}

// kElems values from `first` on, kThreads threads together (thread `tid`), 16 bytes at a time.
template <int kElems, int kThreads, class Operand>
__device__ __forceinline__ void split_in_place(Operand* first, Operand* first_small, int tid) {
  static_assert(kElems % (4 * kThreads) == 0);
  float4* big = reinterpret_cast<float4*>(first);
  float4* small = reinterpret_cast<float4*>(first_small);
  CUTE_UNROLL
  for (int i = tid; i < kElems / 4; i += kThreads) split_vector(big[i], &big[i], &small[i]);
}

// The key that column j of V^T holds (within its group of 8: 0 2 4 6 1 3 5 7; Tf32x3KeyOrder's
// mapping, tf32x3.hpp, which the A-operand view gmma_tf32_acc_as_a_operand implies).
__device__ __forceinline__ int key_of_column(int j) { return (j & ~7) | ((j & 3) << 1) | ((j >> 2) & 1); }

// V (TMA's K-major tile, keys x columns) rewritten in place as V^T's big parts (columns x keys,
// keys in P's order) and V^T's small parts, by the split warpgroup. Each thread moves blocks of
// 4 columns of V^T (4 consecutive j, keys key_of_column(j0 + i)) by 4 head-dim columns: four
// 16-byte reads along V's rows, four 16-byte writes along V^T's rows to each buffer. Every read
// comes before any write (the warpgroup's named barrier). The blocks are dealt so that each 8
// threads of a 16-byte access touch 8 different 16-byte bank groups in both layouts: thread l of
// a group of 8 takes column block j0 / 4 = l ^ g (g: the group) and head-dim block (l with its two
// low bits swapped), under the 128-byte swizzle (16-byte chunk c of row r sits at c ^ (r % 8)).
template <class Traits>
__device__ __forceinline__ void transpose_split_v(typename Traits::Operand* v, typename Traits::Operand* v_small,
                                                  int tid, int barrier) {
  constexpr int kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  static_assert(kBlockN % 32 == 0 && kHeadDim % 32 == 0, "blocks are dealt by 8 x 8 per 32 x 32");
  const Tensor sV = cute::make_tensor(make_smem_ptr(v), typename Traits::SmemLayoutK{});  // (key, column)
  Tensor sVt = cute::make_tensor(make_smem_ptr(v), typename Traits::SmemLayoutVt{});
  Tensor sVts = cute::make_tensor(make_smem_ptr(v_small), typename Traits::SmemLayoutVt{});
  float4 x[Traits::kSplitBlocks][4];  // [block][key]: 4 head-dim columns each
  int j0[Traits::kSplitBlocks], d0[Traits::kSplitBlocks];
  CUTE_UNROLL
  for (int r = 0; r < Traits::kSplitBlocks; ++r) {
    const int b = tid + r * Traits::kSplitThreads;
    const int l = b % 8, g = b / 8 % 8, rest = b / 64;
    j0[r] = 4 * ((rest % (kBlockN / 32)) * 8 + (l ^ g));
    d0[r] = 4 * ((rest / (kBlockN / 32)) * 8 + ((l & 4) | ((l & 1) << 1) | ((l >> 1) & 1)));
    CUTE_UNROLL
    for (int i = 0; i < 4; ++i)
      x[r][i] = *reinterpret_cast<const float4*>(raw_pointer_cast(&sV(key_of_column(j0[r] + i), d0[r])));
  }
  cutlass::arch::NamedBarrier::sync(Traits::kSplitThreads, barrier);
  CUTE_UNROLL
  for (int r = 0; r < Traits::kSplitBlocks; ++r) {
    const float column[4][4] = {{x[r][0].x, x[r][1].x, x[r][2].x, x[r][3].x},
                                {x[r][0].y, x[r][1].y, x[r][2].y, x[r][3].y},
                                {x[r][0].z, x[r][1].z, x[r][2].z, x[r][3].z},
                                {x[r][0].w, x[r][1].w, x[r][2].w, x[r][3].w}};
    CUTE_UNROLL
    for (int c = 0; c < 4; ++c)
      split_vector(float4{column[c][0], column[c][1], column[c][2], column[c][3]},
                   reinterpret_cast<float4*>(raw_pointer_cast(&sVt(d0[r] + c, j0[r]))),
                   reinterpret_cast<float4*>(raw_pointer_cast(&sVts(d0[r] + c, j0[r]))));
  }
}

// The split warpgroup's loop: the same work items and key tiles as the producer's loads
// (item_tiles), each tile split once it has landed and handed on once its writes are visible to
// the tensor cores (the async proxy). `barrier`: a named barrier of the warpgroup alone.
template <class Traits>
__device__ void split_operands(const FwdParams& p, Tf32x3FwdStorage<Traits>& s, int tid, int barrier) {
  RingPosition<Traits::kStages> k_at, v_at;
  for_each_handed_item(p, s.items, [&](const FwdHandedItem& h) {
    if (!h.sees_keys) return;
    const FwdItemTiles& it = h.tiles;
    for (int n = it.t.last; n >= it.t.first; --n) {
      s.k_barriers.wait(k_at);
      split_in_place<Traits::kTileElemsKV, Traits::kSplitThreads>(s.k[k_at.stage], s.k_small[k_at.stage], tid);
      cutlass::arch::fence_view_async_shared();
      s.k_split.arrive(k_at);
      k_at.advance();
      s.v_barriers.wait(v_at);
      transpose_split_v<Traits>(s.v[v_at.stage], s.v_small[v_at.stage], tid, barrier);
      cutlass::arch::fence_view_async_shared();
      s.v_split.arrive(v_at);
      v_at.advance();
    }
  });
}

}  // namespace memattn::cuda::sm90
