// How a one-pass step's dQ leaves the CTA (one_pass_bwd_kernel.hpp): its fragments are staged in
// shared memory (stage_fragment, swizzled for the bulk reduction: stage_swizzle), then added to the
// fp32 workspace with atomics, whole 128-byte row segments at a time: flush_staged for a head-dim
// share or a workspace wider than the tile, DqBlockFlush for a workspace tile that is one block,
// in parts that the next step issues between its MMAs.
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/bwd_params.hpp"

namespace memattn::cuda {

using namespace cute;

// dQ leaves the CTA through shared memory: the fragments are staged there, then every warp adds
// whole 128-byte row segments to the workspace (one cache line per atomic instruction; straight
// from the fragments, an instruction touches eight rows' lines, four floats each). ncu: the
// fragment atomics held L2 at 83% of its peak at D = 256; 16-byte vector atomics from the
// fragments (four columns per lane) ran 1.8x slower still (H100); from the staged rows (sm_90's
// red.v4.f32, a quarter of the instructions) they changed nothing.
// An m16n8 fp32 accumulator holds each pair of neighbouring columns in consecutive registers.
// `swizzle`: an XOR on every column index (0: a plain row-major stage).
template <class Acc, class Coord>
__device__ __forceinline__ void stage_fragment(const Acc& acc, const Coord& coord, float* stage, int ld, int col0,
                                               int swizzle = 0) {
  CUTE_UNROLL
  for (int e = 0; e < size(acc); e += 2) {
    const int row = get<0>(coord(e)), col = col0 + get<1>(coord(e));
    *reinterpret_cast<float2*>(stage + row * ld + (col ^ swizzle)) = make_float2(acc(e), acc(e + 1));
  }
}

// The kBulkDq rows stage dQ unpadded and laid out as the workspace with GradAccum::swizzled
// (accum_swizzle of the row in its (b, h): `phase` is the tile's first workspace row, mod 8). The eight
// rows of a fragment store then fall on different bank groups (two wavefronts, as with padding),
// and the staged tile is the workspace tile byte for byte, so that it leaves by one bulk
// reduction. The rows a thread holds are 8 apart (m16n8 and wgmma fragments): one XOR for all of
// them. `swizzled` false: a plain stage (workspace rows wider than the tile).
template <class Coord>
__device__ __forceinline__ int stage_swizzle(const Coord& coord, int phase, bool swizzled) {
  return swizzled ? accum_swizzle(phase + get<0>(coord(0))) : 0;
}

// *addr += v in global memory, with no result. (The step cursor's pointers reach here through a
// loop-carried value whose address space the compiler no longer knows: atomicAdd became a generic
// atomic with a shared-memory test per call.)
__device__ __forceinline__ void red_add_global(float* addr, float v) {
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"(addr), "f"(v) : "memory");
}
// The same when `add` (the rows of a partial tile; ptxas makes each a short branch).
__device__ __forceinline__ void red_add_global_if(float* addr, float v, bool add) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p red.global.add.f32 [%0], %1;\n}" ::"l"(addr), "f"(v),
      "r"(int(add))
      : "memory");
}

// Adds the staged rows x kCols tile to `out` (row r at out + r * row_ld), columns below `cols`
// only: dQ of a head-dim share (kHeadSplit > 1), or of a workspace whose rows are wider than the
// tile (DqBlockFlush below otherwise). A thread keeps one column; the loop is unrolled only four
// times (fully unrolled, its addresses and loads took registers from the live dK/dV accumulators:
// 270-560 B of spills).
template <int kCols, int kThreads>
__device__ __forceinline__ void flush_staged(const float* stage, int ld, float* out, std::int64_t row_ld, int rows,
                                             int cols) {
  if constexpr (kCols > kThreads) {  // rows wider than the CTA (D = 512): kCols / kThreads passes
    static_assert(kCols % kThreads == 0);
    CUTE_UNROLL
    for (int pass = 0; pass < kCols / kThreads; ++pass)
      flush_staged<kThreads, kThreads>(stage + pass * kThreads, ld, out + pass * kThreads, row_ld, rows,
                                       cols - pass * kThreads);
  } else if constexpr (kThreads % kCols != 0) {  // rows the threads do not divide (D = 192): 64-column slices
    static_assert(kCols % 64 == 0);
    CUTE_UNROLL
    for (int slice = 0; slice < kCols / 64; ++slice)
      flush_staged<64, kThreads>(stage + slice * 64, ld, out + slice * 64, row_ld, rows, cols - slice * 64);
  } else {
    static_assert(kCols % 32 == 0 && kThreads % kCols == 0);
    constexpr int kRowStep = kThreads / kCols;
    const int col = int(threadIdx.x) % kCols;
    if (col >= cols) return;
    int row = int(threadIdx.x) / kCols;
    out += row * row_ld + col;
    stage += row * ld + col;
#pragma unroll 4
    for (; row < rows; row += kRowStep) {
      red_add_global(out, *stage);
      out += kRowStep * row_ld;
      stage += kRowStep * ld;
    }
  }
}

// The same for a workspace tile that is one block (rows kCols floats apart, all columns), in
// kParts parts that the next step issues between its S GEMM's k-slices (and its dP GEMM's, unless
// the registers are short: kFlushDuringS), so that the loads and atomics overlap the tensor cores
// instead of following the dQ GEMM (the stage is not written again before the next step's dQ
// GEMM, two barriers later). Each part's staged values are loaded one part ahead, so that no
// atomic waits for its load in the middle of the MMAs. Thread t adds the tile's elements t,
// t + kThreads, ... (pass i: element i * kThreads + t): each atomic's address is the thread's base
// plus a constant, and so is the staged element's. (With a runtime row stride each row's 64-bit
// address took ~5 integer instructions per atomic.)
// kStageLd: the stage's row pitch (floats).
template <int kRows, int kCols, int kStageLd, int kThreads, int kParts>
struct DqBlockFlush {
  static_assert(kCols % kThreads == 0 || kThreads % kCols == 0);
  static constexpr int kPassesPerRow = kCols >= kThreads ? kCols / kThreads : 1;
  static constexpr int kRowsPerPass = kCols >= kThreads ? 1 : kThreads / kCols;
  static constexpr int kPasses = kRows * kCols / kThreads;
  static constexpr int kPassesPerPart = (kPasses + kParts - 1) / kParts;
  const float* stage;  // the thread's first staged element
  float* out;          // the thread's first element of the workspace tile
  int passes;          // passes within the tile's rows (<= 0: nothing to add)
  bool full;           // all kRows rows (every thread: a uniform branch, no predicates)
  float loaded[2][kPassesPerPart];  // parts p and p + 1 (registers: every index is a constant)

  // `rows` 0: nothing pending (out is not used).
  __device__ DqBlockFlush(const float* stage_tile, float* out_tile, int rows, int t)
      : stage(stage_tile + t / kCols * kStageLd + t % kCols), out(out_tile + t) {
    const int rows_left = rows - t / kCols;  // rows of the thread's column
    passes = kCols >= kThreads ? rows_left * kPassesPerRow : (rows_left + kRowsPerPass - 1) / kRowsPerPass;
    full = rows == kRows;
  }
  // `part` is a compile-time value once the caller's loop is unrolled.
  __device__ __forceinline__ void load(int part) {
    CUTE_UNROLL
    for (int j = 0; j < kPassesPerPart; ++j) {
      const int i = part * kPassesPerPart + j;
      if (i < kPasses)
        loaded[part % 2][j] = stage[i / kPassesPerRow * kRowsPerPass * kStageLd + i % kPassesPerRow * kThreads];
    }
  }
  // Adds part `part` (loaded before) and loads the next.
  __device__ __forceinline__ void add(int part) {
    if (part + 1 < kParts) load(part + 1);
    if (full) {
      CUTE_UNROLL
      for (int j = 0; j < kPassesPerPart; ++j) {
        const int i = part * kPassesPerPart + j;
        if (i < kPasses) red_add_global(out + i * kThreads, loaded[part % 2][j]);
      }
    } else {
      CUTE_UNROLL
      for (int j = 0; j < kPassesPerPart; ++j) {
        const int i = part * kPassesPerPart + j;
        if (i < kPasses) red_add_global_if(out + i * kThreads, loaded[part % 2][j], i < passes);
      }
    }
  }
  __device__ __forceinline__ void add_all() {
    load(0);
    CUTE_UNROLL
    for (int part = 0; part < kParts; ++part) add(part);
  }
};

}  // namespace memattn::cuda
