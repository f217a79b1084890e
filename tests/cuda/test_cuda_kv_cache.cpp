// The KV cache on the CUDA backend (the kPagedKV rows, paged_kv.hpp; caches of one page per
// sequence on the plain rows, as strided tensors; the append, kv_cache.cu): the CPU test's calls
// (support/kv_cache.hpp) with every buffer mirrored to the device. Contiguous, batch_idx and paged
// caches (page 1, 16, 64, 256, 512: pages smaller than, equal to and larger than a key tile, and
// one page per sequence) each match the float64 reference read before the append, and those that
// run on the same row (one page per sequence: strided tensors) give outputs equal bit for bit; the
// cache after the call holds the new keys at their slots (written by the forward kernel, or past
// 16 new keys by the append kernel) and nothing else changed; split keys
// (1 to 64 parts) agree with the reference; grouped heads of one query row run as rows (causal) or
// not (a left window); fp32 caches of one page per sequence run on the 3xTF32 rows; refusals write
// nothing.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memattn/memattn.hpp"
#include "stream_gate.hpp"
#include "support/kv_cache.hpp"

namespace memattn {
namespace {

using testing::Buffer;
using testing::Call;
using testing::check_layouts;
using testing::Layout;
using testing::Shape;

// Device copies of a call's buffers, freed with it.
class DeviceBuffers {
 public:
  ~DeviceBuffers() {
    for (void* p : ptrs_) cudaFree(p);
  }
  // A device copy of `bytes` host bytes (null for none: a tensor without elements).
  void* upload(const void* host, std::size_t bytes) {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
    ptrs_.push_back(p);
    cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
    return p;
  }
  template <class T>
  const std::int32_t* upload(const std::vector<T>& v) {
    return static_cast<const std::int32_t*>(upload(v.data(), v.size() * sizeof(T)));
  }

 private:
  std::vector<void*> ptrs_;
};

void download(Buffer& host, const void* device) {
  if (device != nullptr) cudaMemcpy(host.data(), device, host.bytes.size(), cudaMemcpyDeviceToHost);
}

// Runs the call on the GPU from device copies of its buffers; out, lse and the cache come back.
Status run_on_device(Call& call, const ForwardArgs& host, int num_splits) {
  DeviceBuffers d;
  ForwardArgs a = host;
  a.backend = Backend::cuda;
  a.overrides.num_splits = num_splits;
  a.q.data = d.upload(call.q.data(), call.q.bytes.size());
  a.k.data = d.upload(call.k_cache.data(), call.k_cache.bytes.size());
  a.v.data = d.upload(call.v_cache.data(), call.v_cache.bytes.size());
  a.out.data = d.upload(call.out.data(), call.out.bytes.size());
  a.lse.data = d.upload(call.lse.data(), call.lse.bytes.size());
  KvCache& c = a.kv_cache;
  if (c.k_new.defined()) {
    c.k_new.data = d.upload(call.k_new.data(), call.k_new.bytes.size());
    c.v_new.data = d.upload(call.v_new.data(), call.v_new.bytes.size());
  }
  c.seqlens.data = d.upload(call.seqlens);
  if (c.batch_idx.defined()) c.batch_idx.data = d.upload(call.batch_idx);
  if (c.block_table.defined()) c.block_table.data = d.upload(call.block_table);
  if (const Status p = describe_plan(a, &call.plan); !p.ok()) return p;
  const Status s = forward(a);
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
    return {StatusCode::device_error, cudaGetErrorString(e)};
  download(call.out, a.out.data);
  download(call.lse, a.lse.data);
  download(call.k_cache, a.k.data);
  download(call.v_cache, a.v.data);
  return s;
}

testing::Runner on_device(int num_splits = 0) {
  return [num_splits](Call& call, const ForwardArgs& a) { return run_on_device(call, a, num_splits); };
}

const std::vector<std::int64_t> kPageSizes = {1, 16, 64, 256, 512};

class CudaKvCache : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  }
};

Shape decode_shape(DType dtype, std::int64_t D) {
  Shape s;
  s.dtype = dtype;
  s.Hq = 8;
  s.Hk = 2;
  s.D = s.Dv = D;
  s.capacity = 300;
  s.held = {5, 0, 290};
  return s;
}

TEST_F(CudaKvCache, DecodingReadsEveryLayoutAlike) {
  check_layouts(decode_shape(DType::bf16, 128), Backend::cuda, kPageSizes, on_device());
}

TEST_F(CudaKvCache, DecodingWithAWindowKeepsItsHeads) {
  // One query row under a left window: its keys depend on each sequence's length, so the heads are
  // not packed as rows (pack_gqa.hpp); causal decoding above is.
  Shape s = decode_shape(DType::bf16, 128);
  s.m_new = 1;
  s.mask = Mask::window(37, 0, Alignment::bottom_right);
  check_layouts(s, Backend::cuda, {16, 64}, on_device());
}

TEST_F(CudaKvCache, AppendThenAttendChunkedPrefill) {
  Shape s = decode_shape(DType::bf16, 128);
  s.Mq = 70;  // more than one query tile
  s.m_new = 70;
  s.held = {0, 100, 230};
  check_layouts(s, Backend::cuda, kPageSizes, on_device());
}

TEST_F(CudaKvCache, WindowAndNoMaskWithNewKeys) {
  Shape s = decode_shape(DType::f16, 64);
  s.Mq = 3;
  s.m_new = 4;
  s.held = {64, 1, 200};
  s.mask = Mask::window(50, 0, Alignment::bottom_right);
  check_layouts(s, Backend::cuda, {16, 64}, on_device());
  s.mask = Mask::none();
  check_layouts(s, Backend::cuda, {16, 64}, on_device());
}

// Up to 16 new keys the forward kernel writes them into the cache itself (cache_append.hpp), more
// go through the append kernel first; under a left window of 2 one query row sees only the last
// 3 keys, so most new rows are written by the CTA that writes them all, read by none.
TEST_F(CudaKvCache, NewKeysNoQuerySeesStillReachTheCache) {
  for (const std::int64_t m_new : {1, 6, 16, 17}) {
    SCOPED_TRACE("new keys " + std::to_string(m_new));
    Shape s = decode_shape(DType::bf16, 128);
    s.held = {5, 0, 270};
    s.m_new = m_new;
    s.mask = Mask::window(2, 0, Alignment::bottom_right);
    check_layouts(s, Backend::cuda, {16, 64}, on_device());
    s.mask = Mask::causal(Alignment::bottom_right);
    check_layouts(s, Backend::cuda, {16}, on_device());
  }
}

TEST_F(CudaKvCache, HeadDims64And256AndMultiQuery) {
  for (const auto& [dtype, D] : {std::pair{DType::f16, std::int64_t(64)}, std::pair{DType::bf16, std::int64_t(256)},
                                 std::pair{DType::bf16, std::int64_t(96)}}) {
    SCOPED_TRACE("D " + std::to_string(D));
    Shape s = decode_shape(dtype, D);
    s.Hq = 6;
    s.Hk = 1;
    s.m_new = 1;
    check_layouts(s, Backend::cuda, {16, 256}, on_device());
  }
}

TEST_F(CudaKvCache, SplitKeysAgreeWithTheReference) {
  Shape s = decode_shape(DType::bf16, 128);
  s.capacity = 4096;
  s.held = {4000, 17, 2500};
  s.m_new = 1;
  const testing::Contents c = testing::draw(s);
  for (int splits : {1, 2, 7, 64}) {
    SCOPED_TRACE("num_splits " + std::to_string(splits));
    testing::run_and_check(c, Layout::paged, 16, Backend::cuda, on_device(splits));
  }
}

// The dispatcher's plan for a call stored in `layout`.
std::string plan_of(Layout layout, std::int64_t page_size) {
  Call call = testing::store(testing::draw(decode_shape(DType::bf16, 128)), layout, page_size);
  DeviceBuffers d;
  ForwardArgs a = call.args(Backend::cuda);
  a.q.data = d.upload(call.q.data(), call.q.bytes.size());
  a.k.data = d.upload(call.k_cache.data(), call.k_cache.bytes.size());
  a.v.data = d.upload(call.v_cache.data(), call.v_cache.bytes.size());
  a.out.data = d.upload(call.out.data(), call.out.bytes.size());
  a.lse.data = d.upload(call.lse.data(), call.lse.bytes.size());
  a.kv_cache.seqlens.data = d.upload(call.seqlens);
  if (layout == Layout::paged) a.kv_cache.block_table.data = d.upload(call.block_table);
  if (layout == Layout::batch_idx) a.kv_cache.batch_idx.data = d.upload(call.batch_idx);
  std::string plan;
  const Status st = describe_plan(a, &plan);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return plan;
}

// Pages take the paged rows; a cache of one page per sequence (contiguous, batch_idx, or a block
// table of one column: pages of 512 for a capacity of 300) the plain rows, which read it as strided
// tensors instead of locating each key row.
TEST_F(CudaKvCache, ThePlanNamesTheRowsOfTheLayout) {
  const std::string paged = plan_of(Layout::paged, 16);
  EXPECT_NE(paged.find("_paged"), std::string::npos) << paged;
  EXPECT_EQ(paged.find("strided rows"), std::string::npos) << paged;
  EXPECT_NE(paged.find("query heads of each kv head as its rows"), std::string::npos) << paged;  // GQA 8/2, one row
  for (const auto& [layout, page] : {std::pair{Layout::contiguous, std::int64_t(0)},
                                     std::pair{Layout::batch_idx, std::int64_t(0)},
                                     std::pair{Layout::paged, std::int64_t(512)}}) {
    const std::string plan = plan_of(layout, page);
    EXPECT_NE(plan.find("_plain"), std::string::npos) << plan;
    EXPECT_NE(plan.find("the KV cache read as strided rows"), std::string::npos) << plan;
  }
}

// fp32 has no paged row, but a cache of one page per sequence runs on the 3xTF32 plain rows.
TEST_F(CudaKvCache, Fp32CachesOfOnePagePerSequence) {
  Shape s = decode_shape(DType::f32, 64);
  s.m_new = 2;
  s.Mq = 2;
  const testing::Contents c = testing::draw(s);
  for (const Layout layout : {Layout::contiguous, Layout::batch_idx}) {
    SCOPED_TRACE("layout " + std::to_string(int(layout)));
    testing::run_and_check(c, layout, 0, Backend::cuda, on_device());
  }
}

// With KvCache::max_seqlen_k the call reads no index on the host: it returns while its stream is
// held, and its output is the checked call's bit for bit. Indices past the bound or the cache are
// clamped by the kernels (no error, no access outside the tensors: compute-sanitizer's part).
TEST_F(CudaKvCache, BoundedCallsReadNothingOnTheHost) {
  Shape s = decode_shape(DType::bf16, 128);
  s.m_new = 1;
  // One stored cache (store() draws its own page order) for the checked call and both bounded ones.
  const Call stored = testing::store(testing::draw(s), Layout::paged, 16);
  Call checked = stored;
  reference::ForwardResult ref;
  ASSERT_TRUE(reference::forward(checked.args(Backend::reference), &ref).ok());
  ASSERT_TRUE(run_on_device(checked, checked.args(Backend::cuda), 0).ok());
  // The bounded calls are compared with this one: it must be right, not merely the same.
  testing::expect_close(checked.out, ref.out, testing::tolerance(s.dtype), "out");
  testing::expect_close(checked.lse, ref.lse, 1e-5, "lse");

  for (const bool malformed : {false, true}) {
    SCOPED_TRACE(malformed ? "malformed indices" : "valid indices");
    Call call = stored;
    if (malformed) {
      call.seqlens[0] = 100000;
      call.block_table[3] = -7;
      call.block_table[5] = std::int32_t(call.num_pages + 11);
    }
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    DeviceBuffers d;
    ForwardArgs a = call.args(Backend::cuda);
    a.stream = stream;
    a.kv_cache.max_seqlen_k = s.capacity;
    a.q.data = d.upload(call.q.data(), call.q.bytes.size());
    a.k.data = d.upload(call.k_cache.data(), call.k_cache.bytes.size());
    a.v.data = d.upload(call.v_cache.data(), call.v_cache.bytes.size());
    a.out.data = d.upload(call.out.data(), call.out.bytes.size());
    a.lse.data = d.upload(call.lse.data(), call.lse.bytes.size());
    a.kv_cache.k_new.data = d.upload(call.k_new.data(), call.k_new.bytes.size());
    a.kv_cache.v_new.data = d.upload(call.v_new.data(), call.v_new.bytes.size());
    a.kv_cache.seqlens.data = d.upload(call.seqlens);
    a.kv_cache.block_table.data = d.upload(call.block_table);
    Status st;
    EXPECT_TRUE(testing::returns_without_waiting(stream, std::chrono::seconds(60), [&] { st = forward(a); }));
    EXPECT_TRUE(st.ok()) << st.to_string();
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    download(call.out, a.out.data);
    cudaStreamDestroy(stream);
    if (!malformed) EXPECT_TRUE(call.out.bytes == checked.out.bytes) << "the bounded output differs";
  }
}

TEST_F(CudaKvCache, RefusalsWriteNothing) {
  // fp32 has no paged row (unsupported); a page out of range is invalid. Neither writes.
  for (const bool bad_page : {false, true}) {
    Shape s = decode_shape(bad_page ? DType::bf16 : DType::f32, 64);
    s.m_new = 1;
    Call call = testing::store(testing::draw(s), Layout::paged, 16);
    // Sequence 0's first page: it holds the sequence's keys and receives its new one.
    if (bad_page) call.block_table[0] = std::int32_t(call.num_pages + 3);
    const Call before = call;
    const Status st = run_on_device(call, call.args(Backend::cuda), 0);
    EXPECT_EQ(st.code(), bad_page ? StatusCode::invalid_argument : StatusCode::unsupported) << st.to_string();
    EXPECT_TRUE(call.k_cache.bytes == before.k_cache.bytes && call.v_cache.bytes == before.v_cache.bytes)
        << "the cache was written";
    EXPECT_TRUE(call.out.bytes == before.out.bytes) << "out was written";
  }
}

}  // namespace
}  // namespace memattn
