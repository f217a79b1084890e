// K and V tiles from a KV cache's pages (the kPagedKV rows): the keys of a sequence are not one
// strided run of rows but positions j whose page comes from the block table (FwdParams::cache_*),
// so each row's address is looked up. Any page size: a tile may span pages, and a page be smaller
// than a copy's row block.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/fast_math.h>

#include <cstdint>

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

  // Page and slot of position j, the page clamped into the cache (values the host did not read).
  CUTE_HOST_DEVICE void locate(int j, std::int64_t* page, int* slot) const {
    int index = 0;
    page_size(index, *slot, j);
    const std::int64_t listed = table != nullptr ? std::int64_t(table[index]) : std::int64_t(own_page);
    *page = listed < 0 ? 0 : (listed >= num_pages ? num_pages - 1 : listed);
  }
};

// A key row's page and slot, looked up once per tile for both of its copies (K and V).
struct PagedRow {
  int page;  // block-table entries are int32
  int slot;
};

// Rows [n0, n0 + rows) of a kRows-key tile located into `out` by `threads` threads, this one
// `thread` of them. With each copy unit looking its row up (a division and a dependent
// block-table read before its cp.async), a one-warp CTA did 16 of them per thread per copy: bf16,
// D = 128, B 16 / 32k keys / 32-8 heads on the 16-row tile, a contiguous cache took 0.834 ms where
// the same keys as tensors took 0.564 (H200); located once per tile, 0.933 against 0.759 (H100).
template <int kRows>
CUTE_HOST_DEVICE void locate_tile_rows(const PageLookup& pages, int n0, int rows, int thread, int threads,
                                       PagedRow* out) {
  for (int r = thread; r < kRows && r < rows; r += threads) {
    std::int64_t page = 0;
    int slot = 0;
    pages.locate(n0 + r, &page, &slot);
    out[r] = {int(page), slot};
  }
}

// The rows of one tile as locate_tile_rows left them, in PageLookup's terms (position j).
struct LocatedRows {
  const PagedRow* rows;
  int n0;

  CUTE_HOST_DEVICE void locate(int j, std::int64_t* page, int* slot) const {
    const PagedRow r = rows[j - n0];
    *page = r.page;
    *slot = r.slot;
  }
};

// Walks the copy units of key rows [n0, n0 + kRows) of a sequence (found by a PageLookup, or by the
// tile's LocatedRows), as the tiled copy `thr` would split a strided tile whose rows start at
// `head_base` (the cache tensor at page 0, row 0, of the head): each unit moved by the difference
// between its row's place in its page and its place in that layout. `visit(unit, m, k)` gets each
// unit in range (a gmem tensor of its elements, at its page); `skip(m, k)` each unit past `rows`
// or `cols` (which the copy zero-fills). Host and device: tests/cuda/test_paged_kv.cu checks the
// addresses on the host.
template <class ThrCopy, class Element, class TileShape, class Rows, class Visit, class Skip>
CUTE_HOST_DEVICE void for_each_paged_unit(const ThrCopy& thr, const Element* head_base, std::int64_t page_stride,
                                          std::int64_t row_stride, TileShape tile, const Rows& pages,
                                          int n0, int rows, int cols, Visit&& visit, Skip&& skip) {
  using namespace cute;
  Tensor src = thr.partition_S(cute::make_tensor(make_gmem_ptr(head_base), tile, make_stride(row_stride, _1{})));
  Tensor coord = thr.partition_S(make_identity_tensor(tile));
  CUTE_UNROLL
  for (int m = 0; m < size<1>(src); ++m) {
    const int r = get<0>(coord(0, m, 0));
    const bool row_ok = r < rows;
    std::int64_t delta = 0;
    if (row_ok) {
      std::int64_t page = 0;
      int slot = 0;
      pages.locate(n0 + r, &page, &slot);
      delta = page * page_stride + std::int64_t(slot - r) * row_stride;
    }
    CUTE_UNROLL
    for (int k = 0; k < size<2>(src); ++k) {
      if (row_ok && get<1>(coord(0, m, k)) < cols) {
        Tensor unit = src(_, m, k);
        visit(cute::make_tensor(unit.data() + delta, unit.layout()), m, k);
      } else {
        skip(m, k);
      }
    }
  }
}

// Copies those rows into the shared-memory tile `smem` (cp.async per unit; the rest zero-filled).
template <class TiledCopy, class ThrCopy, class Element, class TileShape, class Smem, class Rows>
__device__ __forceinline__ void copy_paged_rows(const TiledCopy& load, const ThrCopy& thr, const Element* head_base,
                                                std::int64_t page_stride, std::int64_t row_stride, TileShape tile,
                                                Smem&& smem, const Rows& pages, int n0, int rows, int cols) {
  using namespace cute;
  Tensor dst = thr.partition_D(smem);
  for_each_paged_unit(
      thr, head_base, page_stride, row_stride, tile, pages, n0, rows, cols,
      [&](auto&& unit, int m, int k) { copy(load, unit, dst(_, m, k)); },
      [&](int m, int k) { clear_unit(dst(_, m, k)); });
}

}  // namespace memattn::cuda
