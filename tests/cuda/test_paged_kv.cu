// The paged K/V loads' addresses (common/paged_kv.hpp), on the host (no GPU): for every thread of
// the forward's tiled copies (the 64-row and the 16-row tile; rows located once per tile as the
// kernels do, K's and V's), every unit of a key tile in range lands at its row's page
// slot and column, every in-range (row, 8-column chunk) exactly once over the threads, and the
// units past the tile's keys or head dim are the ones skipped (zero-filled). Page sizes below,
// equal to and above the 64-key tile, tiles that cross pages, and a contiguous cache (page b of
// Mk_max rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "cuda/common/paged_kv.hpp"
#include "cuda/sm80/fwd_traits.hpp"

namespace memattn::cuda {
namespace {

// The few-queries tile (four warps) and the decoding tile (one warp: each thread walks 16 rows).
using Tile64 = sm80::FwdTraits<cutlass::bfloat16_t, 128, 64, 64, 4, Loads::vector16>;
using Tile16 = sm80::FwdTraits<cutlass::bfloat16_t, 128, 16, 64, 1, Loads::vector16>;
// The other copy layouts the paged rows have: D = 64 on the decoding tile (eight threads a row,
// sixteen rows a thread) and D = 256 on the 64-row tile (thirty-two threads a row).
using Tile16D64 = sm80::FwdTraits<cutlass::bfloat16_t, 64, 16, 64, 1, Loads::vector16>;
using Tile64D256 = sm80::FwdTraits<cutlass::bfloat16_t, 256, 64, 64, 4, Loads::vector16>;

struct Layout {
  std::int64_t page_size, pages_per_seq, heads, head_dim, num_pages;
  std::vector<std::int32_t> table;  // [batch, pages_per_seq]; empty: page b
  // An entry outside the cache is clamped into it (values the host did not read).
  std::int64_t page(int b, std::int64_t j) const {
    const std::int64_t listed = table.empty() ? b : table[std::size_t(b * pages_per_seq + j / page_size)];
    return std::min(std::max<std::int64_t>(listed, 0), num_pages - 1);
  }
};

// Runs the walk of every thread over key tile n0 of sequence b (rows, cols in range), its rows as
// `located` gives them, for `operand` (whose tensor has `v_dim` columns for V: the strides differ
// from K's), and checks each unit against the layout's own arithmetic.
template <class Traits>
void check_walk(const Layout& l, const LocatedRow* located, KvOperand operand, std::int64_t v_dim, int b,
                std::int64_t n0, int rows, int cols) {
  using Element = typename Traits::Element;
  // Addresses only: the walk computes them and never reads through them.
  const auto* base = reinterpret_cast<const Element*>(std::uintptr_t(1) << 40);
  const auto tile = cute::make_shape(cute::Int<Traits::kBlockN>{}, cute::Int<Traits::kHeadDim>{});
  const std::int64_t width = operand == KvOperand::k ? l.head_dim : v_dim;
  const std::int64_t row_stride = l.heads * width, page_stride = l.page_size * row_stride;
  typename Traits::LoadCopy load;
  std::map<std::pair<int, int>, int> seen;
  int skipped = 0;
  for (int t = 0; t < Traits::kThreads; ++t) {
    auto thr = load.get_thread_slice(t);
    auto coord = thr.partition_S(cute::make_identity_tensor(tile));
    for_each_paged_unit(
        thr, base, tile, located, operand, rows, cols,
        [&](auto&& unit, int m, int k) {
          const int r = cute::get<0>(coord(0, m, k)), c = cute::get<1>(coord(0, m, k));
          ASSERT_LT(r, rows);
          ASSERT_LT(c, cols);
          const std::int64_t j = n0 + r;
          const std::int64_t want = l.page(b, j) * page_stride + (j % l.page_size) * row_stride + c;
          ASSERT_EQ(&unit(0) - base, want) << "thread " << t << " row " << r << " col " << c;
          ASSERT_EQ(int(cute::size(unit)), 8);
          ASSERT_EQ(&unit(7) - &unit(0), 7);  // one 16-byte run
          ++seen[{r, c}];
        },
        [&](int m, int k) {
          const int r = cute::get<0>(coord(0, m, k)), c = cute::get<1>(coord(0, m, k));
          EXPECT_TRUE(r >= rows || c >= cols) << "skipped an in-range unit: row " << r << " col " << c;
          ++skipped;
        });
  }
  int expected = 0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; c += 8) {
      ++expected;
      EXPECT_EQ((seen[{r, c}]), 1) << "row " << r << " col " << c;
    }
  EXPECT_EQ(int(seen.size()), expected);
  EXPECT_EQ(expected + skipped, Traits::kBlockN * Traits::kHeadDim / 8);
}

// The tile's rows located by every thread of the CTA, as the kernels do (rows past the keys are
// left unset, -1, so that a walk reading them would land elsewhere), then K's and V's walks; V has
// 64 columns where K has the layout's head dim, so that its offsets differ from K's.
template <class Traits>
void check_tile_of(const Layout& l, int b, std::int64_t n0, int rows, int cols) {
  FwdParams p{};
  p.cache_pages = l.table.empty() ? nullptr : l.table.data();
  p.cache_pages_stride = l.pages_per_seq;
  set_cache_page_size(l.page_size, &p);
  p.cache_num_pages = l.num_pages;
  const PageLookup pages(p, b);
  constexpr std::int64_t kVDim = 64;
  const PageStrides strides{l.page_size * l.heads * l.head_dim, l.heads * l.head_dim, l.page_size * l.heads * kVDim,
                            l.heads * kVDim};
  std::vector<LocatedRow> located(Traits::kBlockN, LocatedRow{-1, -1});
  for (int t = 0; t < Traits::kThreads; ++t) {
    constexpr int kRows = Traits::kBlockN, kThreads = Traits::kThreads;
    const TilePages<kRows, kThreads> read = read_tile_pages<kRows, kThreads>(pages, int(n0), rows, t);
    locate_tile_rows<kRows, kThreads>(pages, read, strides, int(n0), rows, t, located.data());
  }
  {
    SCOPED_TRACE("K");
    check_walk<Traits>(l, located.data(), KvOperand::k, kVDim, b, n0, rows, cols);
  }
  SCOPED_TRACE("V");
  check_walk<Traits>(l, located.data(), KvOperand::v, kVDim, b, n0, rows, std::min<int>(cols, kVDim));
}

void check_tile(const Layout& l, int b, std::int64_t n0, int rows, int cols) {
  {
    SCOPED_TRACE("64-row tile");
    check_tile_of<Tile64>(l, b, n0, rows, cols);
  }
  SCOPED_TRACE("16-row tile");
  check_tile_of<Tile16>(l, b, n0, rows, cols);
}

Layout shuffled_pages(std::int64_t page_size, int batch, std::int64_t capacity) {
  Layout l{page_size, (capacity + page_size - 1) / page_size, 2, 128, 0, {}};
  l.table.resize(std::size_t(batch * l.pages_per_seq));
  l.num_pages = std::int64_t(l.table.size());
  std::iota(l.table.begin(), l.table.end(), 0);
  std::shuffle(l.table.begin(), l.table.end(), std::mt19937(7));
  return l;
}

TEST(PagedKv, UnitsLandAtTheirPagesSlots) {
  for (const std::int64_t page : {1, 7, 16, 64, 100, 256}) {
    SCOPED_TRACE("page size " + std::to_string(page));
    const Layout l = shuffled_pages(page, 3, 600);
    for (const std::int64_t n0 : {0, 64, 192, 512})
      for (const int b : {0, 2}) check_tile(l, b, n0, n0 == 512 ? 88 - 64 : 64, 128);
  }
}

TEST(PagedKv, HeadDims64And256) {
  for (const std::int64_t page : {1, 16, 64, 256}) {
    SCOPED_TRACE("page size " + std::to_string(page));
    Layout l = shuffled_pages(page, 2, 300);
    l.head_dim = 64;
    for (const std::int64_t n0 : {0, 64, 256}) {
      SCOPED_TRACE("D 64, 16-row tile");
      check_tile_of<Tile16D64>(l, 1, n0, n0 == 256 ? 300 - 256 : 64, 64);
      check_tile_of<Tile16D64>(l, 0, n0, 3, 40);
    }
    l.head_dim = 256;
    for (const std::int64_t n0 : {0, 64, 256}) {
      SCOPED_TRACE("D 256, 64-row tile");
      check_tile_of<Tile64D256>(l, 1, n0, n0 == 256 ? 300 - 256 : 64, 256);
      check_tile_of<Tile64D256>(l, 0, n0, 64, 200);
    }
  }
}

TEST(PagedKv, PartialTilesAndHeadDims) {
  const Layout l = shuffled_pages(16, 2, 200);
  check_tile(l, 1, 128, 5, 128);  // 5 keys left in the sequence
  check_tile(l, 0, 64, 64, 96);   // D = 96 in the 128 bucket
  check_tile(l, 1, 0, 1, 8);
}

TEST(PagedKv, ContiguousCacheIsPageB) {
  const Layout l{300, 1, 2, 128, 3, {}};  // [B = 3, Mk_max = 300, Hk, D], no table
  check_tile(l, 2, 256, 300 - 256, 128);
  check_tile(l, 0, 0, 64, 128);
}

TEST(PagedKv, ContiguousCacheLongerThanInt32Positions) {
  // Mk_max past int32: the lookup's divisor is clamped, positions (int32) keep page 0.
  const Layout l{std::int64_t(1) << 33, 1, 2, 128, 2, {}};
  check_tile(l, 1, 1 << 30, 64, 128);
}

TEST(PagedKv, PositionsDivideExactly) {
  // The precomputed division against / and %, over page sizes and positions up to int32's end.
  const std::vector<std::int64_t> sizes = {1, 2, 3, 7, 16, 100, 1000, 4096, 65537, 1 << 20, kMaxCachePosition - 1,
                                           kMaxCachePosition};
  std::vector<int> positions = {0, 1, 2, 15, 16, 17, 999, 1000, 65536, 1 << 30, int(kMaxCachePosition) - 1,
                                int(kMaxCachePosition)};
  std::mt19937 gen(11);
  for (int i = 0; i < 2000; ++i) positions.push_back(int(gen() >> 1));
  // A table that lists page i at column i, read where the quotient is one of its columns.
  std::vector<std::int32_t> table(1 << 12);
  std::iota(table.begin(), table.end(), 0);
  for (const std::int64_t size : sizes) {
    FwdParams p{};
    set_cache_page_size(size, &p);
    p.cache_num_pages = std::int64_t(table.size());
    const PageLookup own_page(p, 0);
    p.cache_pages = table.data();
    const PageLookup listed(p, 0);
    for (const int j : positions) {
      const bool in_table = j / size < std::int64_t(table.size());
      std::int64_t page = -1;
      int slot = -1;
      (in_table ? listed : own_page).locate(j, &page, &slot);
      ASSERT_EQ(slot, j % size) << "page size " << size << " position " << j;
      ASSERT_EQ(page, in_table ? j / size : 0) << "page size " << size << " position " << j;
    }
  }
}

TEST(PagedKv, PagesOutsideTheCacheAreClamped) {
  // Block-table entries the host did not check (KvCache::max_seqlen_k) stay inside the cache.
  Layout l = shuffled_pages(16, 2, 128);
  l.table[1] = -5;
  l.table[2] = std::int32_t(l.num_pages + 9);
  check_tile(l, 0, 0, 64, 128);
}

}  // namespace
}  // namespace memattn::cuda
