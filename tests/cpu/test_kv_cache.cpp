// The KV cache of the forward (ForwardArgs::kv_cache) on the CPU backends: append then attend,
// contiguous (with and without batch_idx) and paged caches holding the same keys give the same
// output bit for bit, every output matches the float64 reference read from the cache before the
// call, the cache changes exactly at the new keys' slots, and every malformed field is refused
// with the cache and the outputs untouched. Slots that no position uses hold NaN, so a read of
// one shows in the output (support/kv_cache.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "memattn/memattn.hpp"
#include "support/kv_cache.hpp"

namespace memattn {
namespace {

using testing::Call;
using testing::check_layouts;
using testing::Contents;
using testing::draw;
using testing::expect_appended;
using testing::expect_close;
using testing::Layout;
using testing::Shape;
using testing::store;
using testing::tolerance;

const std::vector<std::int64_t> kPageSizes = {1, 7, 16};

TEST(KvCache, DecodingReadsEveryLayoutAlike) { check_layouts(Shape{}, Backend::cpu, kPageSizes); }

TEST(KvCache, ReferenceBackendAppendsToo) {
  Shape s;
  s.m_new = 2;
  check_layouts(s, Backend::reference, {16});
}

TEST(KvCache, AppendThenAttendChunkedPrefill) {
  Shape s;
  s.Mq = 5;
  s.m_new = 5;
  s.held = {0, 11, 30};
  check_layouts(s, Backend::cpu, kPageSizes);
}

TEST(KvCache, AppendWithWindowAndNoMask) {
  Shape s;
  s.Mq = 2;
  s.m_new = 3;  // Mq < M_new: the queries are the last two positions
  s.held = {16, 1, 33};
  s.mask = Mask::window(4, 0, Alignment::bottom_right);
  check_layouts(s, Backend::cpu, kPageSizes);
  s.mask = Mask::none();
  check_layouts(s, Backend::cpu, kPageSizes);
}

TEST(KvCache, HalfPrecisionAndMultiQuery) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    Shape s;
    s.dtype = dtype;
    s.Hq = 6;
    s.Hk = 1;
    s.D = 33;
    s.Dv = 40;
    s.m_new = 1;
    s.held = {8, 21, 2};
    check_layouts(s, Backend::cpu, kPageSizes);
  }
}

TEST(KvCache, NoQueryStillAppends) {
  Shape s;
  s.Mq = 0;
  s.m_new = 2;
  const Contents c = draw(s);
  Call call = store(c, Layout::paged, 4);
  const Call before = call;
  const Status st = forward(call.args());
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_appended(before, call);
}

// A malformed call: refused as invalid_argument with `field` in the message, nothing written.
template <class Edit>
void expect_refused(const std::string& field, Layout layout, Shape shape, Edit edit) {
  shape.m_new = std::max<std::int64_t>(shape.m_new, 1);
  const Contents c = draw(shape);
  Call call = store(c, layout, 8);
  const Call before = call;
  ForwardArgs a = call.args();
  edit(call, a);
  const Status s = forward(a);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument) << field << ": " << s.to_string();
  EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  EXPECT_TRUE(call.k_cache.bytes == before.k_cache.bytes) << field << ": k cache written";
  EXPECT_TRUE(call.v_cache.bytes == before.v_cache.bytes) << field << ": v cache written";
  EXPECT_TRUE(call.out.bytes == before.out.bytes) << field << ": out written";
}

TEST(KvCache, MalformedFieldsAreRefusedWithNothingWritten) {
  const Shape s;
  expect_refused("kv_cache.seqlens", Layout::contiguous, s, [](Call& c, ForwardArgs&) { c.seqlens[2] = 40; });
  expect_refused("kv_cache.seqlens", Layout::paged, s, [](Call& c, ForwardArgs&) { c.seqlens[0] = -1; });
  expect_refused("kv_cache.seqlens", Layout::contiguous, s, [](Call&, ForwardArgs& a) { a.kv_cache.seqlens.size = 2; });
  expect_refused("kv_cache.block_table", Layout::paged, s,
                 [](Call& c, ForwardArgs&) { c.block_table[std::size_t(c.pages_per_seq)] = std::int32_t(c.num_pages); });
  expect_refused("kv_cache.block_table", Layout::paged, s, [](Call& c, ForwardArgs&) { c.block_table[0] = -3; });
  // Sequence 0 (5 keys + 1 new, page 8) writes row 5 of its first page; sequence 2 lists it too.
  expect_refused("kv_cache.block_table", Layout::paged, s,
                 [](Call& c, ForwardArgs&) { c.block_table[std::size_t(2 * c.pages_per_seq + 1)] = c.block_table[0]; });
  expect_refused("kv_cache.block_table", Layout::paged, s,
                 [](Call&, ForwardArgs& a) { a.kv_cache.block_table.rows = 2; });
  expect_refused("kv_cache.batch_idx", Layout::batch_idx, s, [](Call& c, ForwardArgs&) { c.batch_idx[1] = 7; });
  expect_refused("kv_cache.batch_idx", Layout::batch_idx, s,
                 [](Call& c, ForwardArgs&) { c.batch_idx[0] = c.batch_idx[2]; });  // two sequences append to one row
  expect_refused("kv_cache.batch_idx", Layout::paged, s, [](Call& c, ForwardArgs& a) {
    c.batch_idx = {0, 1, 2};
    a.kv_cache.batch_idx = make_index(c.batch_idx.data(), 3);
  });
  expect_refused("kv_cache.v_new", Layout::contiguous, s, [](Call&, ForwardArgs& a) { a.kv_cache.v_new = {}; });
  expect_refused("kv_cache.k_new", Layout::contiguous, s, [](Call&, ForwardArgs& a) { a.kv_cache.k_new.dtype = DType::bf16; });
  expect_refused("kv_cache.k_new", Layout::contiguous, s, [](Call&, ForwardArgs& a) { a.kv_cache.k_new.sizes[2] = 1; });
  expect_refused("kv_cache.seqlens", Layout::contiguous, s, [](Call&, ForwardArgs& a) { a.kv_cache.seqlens = {}; });
  expect_refused("k:", Layout::contiguous, s, [](Call&, ForwardArgs& a) { a.k.sizes[0] = a.v.sizes[0] = 2; });
  expect_refused("mask.alignment", Layout::contiguous, s, [](Call&, ForwardArgs& a) { a.mask = Mask::causal(); });
  expect_refused("dropout.p", Layout::contiguous, s, [](Call&, ForwardArgs& a) { a.dropout.p = 0.1; });
  expect_refused("bias", Layout::contiguous, s, [](Call& c, ForwardArgs& a) {
    a.bias = make_tensor(c.q.data(), DType::f32, {1, 1, 1, 1});
  });
}

TEST(KvCache, MaxSeqlenKIsCheckedOnTheHost) {
  // held {5, 0, 37} with capacity 40; expect_refused appends one key: 38 keys at most.
  const Shape s;
  for (const std::int64_t bound : {37, 41, 0})
    expect_refused("kv_cache.max_seqlen_k", Layout::paged, s,
                   [bound](Call&, ForwardArgs& a) { a.kv_cache.max_seqlen_k = bound; });
  Shape t = s;
  t.m_new = 1;
  const Contents c = draw(t);
  Call plain = store(c, Layout::paged, 8);
  ASSERT_TRUE(forward(plain.args()).ok());
  for (const std::int64_t bound : {38, 40}) {
    Call bounded = store(c, Layout::paged, 8);
    ForwardArgs a = bounded.args();
    a.kv_cache.max_seqlen_k = bound;
    const Status st = forward(a);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(bounded.out.bytes == plain.out.bytes) << "bound " << bound;
  }
}

TEST(KvCache, SharedReadOnlyPagesAndRowsAreAccepted) {
  // A prefix page read by every sequence, and two sequences reading one cache row, without writes
  // into what another reads, are valid.
  Shape s;
  s.held = {8, 8, 12};
  s.m_new = 1;
  const Contents c = draw(s);
  Call call = store(c, Layout::paged, 8);
  for (std::int64_t b = 1; b < s.B; ++b) call.block_table[std::size_t(b * call.pages_per_seq)] = call.block_table[0];
  reference::ForwardResult ref;
  ASSERT_TRUE(reference::forward(call.args(), &ref).ok());
  const Status st = forward(call.args());
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_close(call.out, ref.out, tolerance(s.dtype), "out");

  Shape r;
  r.held = {5, 5, 37};
  Call rows = store(draw(r), Layout::batch_idx);
  rows.batch_idx[1] = rows.batch_idx[0];
  reference::ForwardResult rows_ref;
  ASSERT_TRUE(reference::forward(rows.args(), &rows_ref).ok());
  const Status st2 = forward(rows.args());
  ASSERT_TRUE(st2.ok()) << st2.to_string();
  expect_close(rows.out, rows_ref.out, tolerance(r.dtype), "out");
}

}  // namespace
}  // namespace memattn
