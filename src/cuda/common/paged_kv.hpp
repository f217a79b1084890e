// K and V tiles from a KV cache's pages (the kPagedKV rows): the keys of a sequence are not one
// strided run of rows but positions j whose page comes from the block table (FwdParams::cache_*),
// so each row's address is looked up. Any page size: a tile may span pages, and a page be smaller
// than a copy's row block.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/fast_math.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/fragments.hpp"
#include "cuda/common/fwd_params.hpp"

namespace memattn::cuda {

// The page size as FwdParams carries it: cutlass::FastDivmod's divisor, multiplier and shift for
// int32 positions, computed on the host (cache_params, kv_cache.cu), so that a row's page and slot
// cost a multiply-high: a 64-bit division and modulo per row took more issue slots than the decode
// tiles' MMAs (H100, B 1 / 128k keys / D = 128, paged by 16: 2157 -> 1477 us). A contiguous
// cache's page is the whole sequence: any divisor above the positions gives page 0 and the
// position as the slot.
inline void set_cache_page_size(std::int64_t page_size, FwdParams* p) {
  const cutlass::FastDivmod d(int(page_size < 1 ? 1 : (page_size > kMaxCachePosition ? kMaxCachePosition : page_size)));
  p->cache_page_divisor = d.divisor;
  p->cache_page_multiplier = d.multiplier;
  p->cache_page_shift = d.shift_right;
}

// Where sequence b's key positions live (made once per work item by the kernel).
struct PageLookup {
  const int* table;  // the sequence's block-table row (or its batch_idx entry); null: page b
  int own_page;      // b
  std::int64_t num_pages;
  cutlass::FastDivmod page_size;

  CUTE_HOST_DEVICE PageLookup(const FwdParams& p, int b)
      : table(p.cache_pages != nullptr ? p.cache_pages + b * p.cache_pages_stride : nullptr),
        own_page(b),
        num_pages(p.cache_num_pages) {
    page_size.divisor = p.cache_page_divisor;
    page_size.multiplier = p.cache_page_multiplier;
    page_size.shift_right = p.cache_page_shift;
  }

  // The block-table entry of position j's page (the memory read of a lookup) and its slot there.
  CUTE_HOST_DEVICE int listed_page(int j, int* slot) const {
    int index = 0;
    page_size(index, *slot, j);
    return table != nullptr ? table[index] : own_page;
  }
  // An entry clamped into the cache (values the host did not read).
  CUTE_HOST_DEVICE std::int64_t clamped(int listed) const {
    return listed < 0 ? 0 : (listed >= num_pages ? num_pages - 1 : std::int64_t(listed));
  }
  // Page and slot of position j.
  CUTE_HOST_DEVICE void locate(int j, std::int64_t* page, int* slot) const { *page = clamped(listed_page(j, slot)); }
};

// The cache row that holds sequence b's keys where each sequence has one page (a contiguous cache,
// with or without batch_idx, or a block table of one column): its listed page (b without a
// table). The plain rows read it as strided K and V tensors, its rows the key positions.
__device__ __forceinline__ std::int64_t contiguous_cache_row(const FwdParams& p, int b) {
  if (p.cache_pages == nullptr) return b;
  return PageLookup(p, b).clamped(p.cache_pages[b * p.cache_pages_stride]);
}

// Where the cache's pages are, in elements: a page's and a row's stride in K and in V (the cache
// tensors' dims 0 and 1).
struct PageStrides {
  std::int64_t k_page, k_row, v_page, v_row;
};

// A key row's place in K and in V: the element offset of its slot from the head's row 0 in page 0.
// Located once per tile for both of the tile's copies (a lookup per copy unit had cost the one-warp
// tile 0.834 ms against 0.564 on tensors, H200), so that a copy unit's address is its row's offset
// plus its column: with the page and slot kept instead, each unit's row paid two 64-bit
// multiply-adds and a branch, about 20 instructions per 16-byte cp.async where the strided rows
// issue one or two (H200, ncu, B 64 / 8k keys / D 128 paged by 16: 122.9 M instructions against
// 44.8 M for the same bytes, 610 us at 73% of DRAM's bandwidth against 473 us at 95%; with
// offsets 605 -> 508 us, contiguous 487).
struct LocatedRow {
  std::int64_t k, v;
};

// The block-table entries of a kRows-key tile's rows [n0, n0 + rows) that one thread of kThreads
// locates (rows thread, thread + kThreads, ...), read into registers: the kernels read them
// before a GEMM and locate the rows after it (locate_tile_rows), so that the GEMM hides the reads'
// latency. Against reading and locating in one step before the GEMM (H200, paged by 16, us):
// 16-row chunks of B 16 / 8k 270 -> 253, 4 speculative rows 34.2 -> 33.1, B 1 / 32k / D 64 36.7
// -> 36.2, the rest within 0.5%.
template <int kRows, int kThreads>
struct TilePages {
  static constexpr int kPerThread = (kRows + kThreads - 1) / kThreads;
  int listed[kPerThread];
};

template <int kRows, int kThreads>
CUTE_HOST_DEVICE TilePages<kRows, kThreads> read_tile_pages(const PageLookup& pages, int n0, int rows, int thread) {
  TilePages<kRows, kThreads> read{};
  CUTE_UNROLL
  for (int i = 0; i < TilePages<kRows, kThreads>::kPerThread; ++i) {
    const int r = thread + i * kThreads;
    int slot = 0;
    if (r < kRows && r < rows) read.listed[i] = pages.listed_page(n0 + r, &slot);
  }
  return read;
}

// Those rows located into `out` from the entries read: each row's place in K and in V. The slots
// are divided out again (a multiply-high each) rather than kept live across the GEMM.
template <int kRows, int kThreads>
CUTE_HOST_DEVICE void locate_tile_rows(const PageLookup& pages, const TilePages<kRows, kThreads>& read,
                                       const PageStrides& strides, int n0, int rows, int thread, LocatedRow* out) {
  CUTE_UNROLL
  for (int i = 0; i < TilePages<kRows, kThreads>::kPerThread; ++i) {
    const int r = thread + i * kThreads;
    if (r < kRows && r < rows) {
      int index = 0, slot = 0;
      pages.page_size(index, slot, n0 + r);
      const std::int64_t page = pages.clamped(read.listed[i]);
      out[r] = {page * strides.k_page + slot * strides.k_row, page * strides.v_page + slot * strides.v_row};
    }
  }
}

// Which of a LocatedRow's offsets a copy reads.
enum class KvOperand { k, v };

CUTE_HOST_DEVICE std::int64_t row_offset(const LocatedRow& row, KvOperand operand) {
  return operand == KvOperand::k ? row.k : row.v;
}

// A pointer as computed, kept from being re-associated: left free, the compiler added each unit's
// column to the row's offset before scaling it to bytes, a 64-bit add and shift per unit instead
// of the units' immediate offsets from the row's start.
template <class T>
CUTE_HOST_DEVICE const T* pinned(const T* p) {
#if defined(__CUDA_ARCH__)
  asm volatile("" : "+l"(p));
#endif
  return p;
}

// The rows whose offsets a thread reads from shared memory before it issues their copies. One at a
// time, each copy waited for its row's read (ncu, B 1 / 32k keys / D 64 paged by 16: 1.23
// short-scoreboard stalls per issue against 0.33 on the strided rows; 38.5 us against 34.6); four
// ahead, 36.2-36.7 (H200).
constexpr int kRowsAhead = 4;

// Walks the copy units of a kRows-key tile whose rows `located` gives (row r at located[r], in
// `operand`'s offsets), as the tiled copy `thr` splits the tile, from `head_base` (the cache tensor
// at page 0, row 0, of the head). `visit(unit, m, k)` gets each unit in range (a gmem tensor of its
// elements); `skip(m, k)` each unit past `rows` or `cols` (which the copy zero-fills). A full tile
// (every key tile but a sequence's last) takes a walk without the bounds. Host and device:
// tests/cuda/test_paged_kv.cu checks the addresses on the host.
template <class ThrCopy, class Element, class TileShape, class Visit, class Skip>
CUTE_HOST_DEVICE void for_each_paged_unit(const ThrCopy& thr, const Element* head_base, TileShape tile,
                                          const LocatedRow* located, KvOperand operand, int rows, int cols,
                                          Visit&& visit, Skip&& skip) {
  using namespace cute;
  // The columns only: each row's offset is added to its units.
  Tensor src = thr.partition_S(cute::make_tensor(make_gmem_ptr(head_base), tile, make_stride(_0{}, _1{})));
  Tensor coord = thr.partition_S(make_identity_tensor(tile));
  constexpr int kLastM = decltype(size<1>(src))::value - 1, kLastK = decltype(size<2>(src))::value - 1;
  // A row's units are its start plus their columns' constant steps from the thread's first unit,
  // so that a row costs one 64-bit add and its units immediate offsets.
  const Element* first = &src(0, 0, 0);
  constexpr int kRowsPerThread = decltype(size<1>(src))::value;
  constexpr int kBatch = kRowsPerThread < kRowsAhead ? kRowsPerThread : kRowsAhead;
  static_assert(kRowsPerThread % kBatch == 0);
  const auto walk = [&](auto bounded) {
    CUTE_UNROLL
    for (int m0 = 0; m0 < kRowsPerThread; m0 += kBatch) {
      std::int64_t offset[kBatch];
      CUTE_UNROLL
      for (int i = 0; i < kBatch; ++i) {
        const int r = get<0>(coord(0, m0 + i, 0));
        offset[i] = !decltype(bounded)::value || r < rows ? row_offset(located[r], operand) : 0;
      }
      CUTE_UNROLL
      for (int i = 0; i < kBatch; ++i) {
        const int m = m0 + i;
        const bool row_ok = !decltype(bounded)::value || get<0>(coord(0, m, 0)) < rows;
        const Element* row = pinned(first + offset[i]);
        CUTE_UNROLL
        for (int k = 0; k < size<2>(src); ++k) {
          if (row_ok && (!decltype(bounded)::value || get<1>(coord(0, m, k)) < cols)) {
            Tensor unit = src(_, m, k);
            const auto step = src.layout()(0, m, k) - src.layout()(0, 0, 0);  // static: the copy's layout
            visit(cute::make_tensor(make_gmem_ptr(row + step), unit.layout()), m, k);
          } else {
            skip(m, k);
          }
        }
      }
    }
  };
  if (get<0>(coord(0, kLastM, kLastK)) < rows && get<1>(coord(0, kLastM, kLastK)) < cols) walk(std::false_type{});
  else walk(std::true_type{});
}

// Copies those rows into the shared-memory tile `smem` (cp.async per unit; the rest zero-filled).
template <class TiledCopy, class ThrCopy, class Element, class TileShape, class Smem>
__device__ __forceinline__ void copy_paged_rows(const TiledCopy& load, const ThrCopy& thr, const Element* head_base,
                                                TileShape tile, Smem&& smem, const LocatedRow* located,
                                                KvOperand operand, int rows, int cols) {
  using namespace cute;
  Tensor dst = thr.partition_D(smem);
  for_each_paged_unit(
      thr, head_base, tile, located, operand, rows, cols,
      [&](auto&& unit, int m, int k) { copy(load, unit, dst(_, m, k)); },
      [&](int m, int k) { clear_unit(dst(_, m, k)); });
}

}  // namespace memattn::cuda
