// The CLI's --verify (tools/workload/verify.cpp): a run of the fast CPU path passes, an output
// element left unwritten or off by more than the tolerance fails on its line, and large problems
// are checked on a sample (first and last sequence and kv head) that says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "support/seed.hpp"
#include "workload/verify.hpp"

namespace memattn::tools {
namespace {

ProblemSpec spec() {
  ProblemSpec s;
  s.batch = 3;
  s.seqlen_q = 33;
  s.seqlen_k = 41;
  s.heads_q = 4;
  s.heads_k = 2;
  s.head_dim = s.head_dim_v = 16;
  s.dtype = DType::f32;
  s.bias = bias_pattern(BiasKind::dense);
  s.backend = Backend::cpu;
  return s;
}

const CheckLine* line(const VerifyReport& r, const std::string& name) {
  for (const CheckLine& l : r.lines)
    if (l.name == name) return &l;
  return nullptr;
}

// Sets element `e` (contiguous order) of an f32 output.
void poke(Workload& w, Tensor t, std::int64_t e, float value) {
  std::vector<double> v = w.to_double(t);
  v[std::size_t(e)] = value;
  w.set_values(t, v);
}

TEST(Verify, PassesOnTheCpuPathAndFailsOnABadElement) {
  Workload w(spec());
  w.fill_inputs(memattn::testing::next_seed());
  w.poison_outputs();
  ASSERT_TRUE(forward(w.forward_args()).ok());
  ASSERT_TRUE(backward(w.backward_args()).ok());
  VerifyReport fwd, bwd;
  ASSERT_TRUE(verify_forward(w, {}, {}, &fwd).ok());
  ASSERT_TRUE(verify_backward(w, {}, {}, &bwd).ok());
  EXPECT_TRUE(fwd.pass());
  EXPECT_TRUE(bwd.pass());
  EXPECT_EQ(fwd.scope, "all");
  for (const char* name : {"out", "lse"}) EXPECT_NE(line(fwd, name), nullptr) << name;
  for (const char* name : {"dq", "dk", "dv", "dbias"}) EXPECT_NE(line(bwd, name), nullptr) << name;
  EXPECT_EQ(line(bwd, "dq")->tolerance, 2 * line(fwd, "out")->tolerance) << "gradients get twice the outputs' limit";
  // compare() skips the elements the reference leaves NaN: a line that compared nothing would pass.
  for (const VerifyReport* r : {&fwd, &bwd})
    for (const CheckLine& l : r->lines)
      for (Tensor t : {Tensor::out, Tensor::lse, Tensor::dq, Tensor::dk, Tensor::dv, Tensor::dbias})
        if (l.name == to_string(t)) EXPECT_EQ(l.error.compared, w.host(t).view.numel()) << l.name << ": elements compared";

  poke(w, Tensor::out, 17, std::numeric_limits<float>::quiet_NaN());
  VerifyReport unwritten;
  ASSERT_TRUE(verify_forward(w, {}, {}, &unwritten).ok());
  EXPECT_FALSE(unwritten.pass());
  EXPECT_EQ(line(unwritten, "out")->error.bad, 1);
  EXPECT_TRUE(line(unwritten, "lse")->pass());

  std::vector<double> dk = w.to_double(Tensor::dk);
  for (double& x : dk) x *= 1.001;  // a relative error of 1e-3, over f32's 2e-5
  w.set_values(Tensor::dk, dk);
  VerifyReport off;
  ASSERT_TRUE(verify_backward(w, {}, {}, &off).ok());
  EXPECT_FALSE(off.pass());
  EXPECT_FALSE(line(off, "dk")->pass());
  EXPECT_TRUE(line(off, "dq")->pass());
}

// An output off by more than its tolerance, every element finite, fails its line: lines without a
// noise bound (out, lse) once passed whatever their error (abs_l2 <= noise_l2 was 0 <= 0).
TEST(Verify, AFiniteOutputOffByMoreThanItsToleranceFails) {
  ProblemSpec s = spec();
  s.bias.reset();
  Workload w(s);
  w.fill_inputs(memattn::testing::next_seed());
  ASSERT_TRUE(forward(w.forward_args()).ok());
  for (Tensor t : {Tensor::out, Tensor::lse}) {
    std::vector<double> x = w.to_double(t);
    const std::vector<double> kept = x;
    for (double& v : x) v *= 1.001;  // a relative error of 1e-3, over f32's 1e-5
    w.set_values(t, x);
    VerifyReport r;
    ASSERT_TRUE(verify_forward(w, {}, {}, &r).ok());
    EXPECT_FALSE(line(r, to_string(t))->pass()) << to_string(t) << ": relative error " << line(r, to_string(t))->error.rel_l2;
    EXPECT_EQ(line(r, to_string(t))->error.bad, 0);
    EXPECT_FALSE(r.pass());
    w.set_values(t, kept);
  }
  VerifyReport restored;
  ASSERT_TRUE(verify_forward(w, {}, {}, &restored).ok());
  EXPECT_TRUE(restored.pass());
}

// Each query sees one key (window 0, 0): P = 1, so dS = 0 and the exact dQ and dK are zero. The
// fast path's rounding noise there is judged against the magnitudes it came from, not against a
// zero norm (`memattn run --backend cpu --seqlen-q 64 --heads-q 2 --head-dim 64 --window-left 0
// --window-right 0 --dropout 0.3 --seed 5 --verify` failed); an error above the noise still fails.
TEST(Verify, ExactZeroGradientsAreJudgedByTheirNoise) {
  for (DType dtype : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(to_string(dtype));
    ProblemSpec s;
    s.batch = 1;
    s.seqlen_q = s.seqlen_k = 64;
    s.heads_q = s.heads_k = 2;
    s.head_dim = s.head_dim_v = 64;
    s.dtype = dtype;
    s.mask = Mask::window(0, 0);
    s.dropout = {0.3, 5, 0};
    s.backend = Backend::cpu;
    Workload w(s);
    w.fill_inputs(memattn::testing::next_seed());
    w.poison_outputs();
    ASSERT_TRUE(forward(w.forward_args()).ok());
    ASSERT_TRUE(backward(w.backward_args()).ok());
    VerifyReport bwd;
    ASSERT_TRUE(verify_backward(w, {}, {}, &bwd).ok());
    for (const char* name : {"dq", "dk", "dv"}) {
      EXPECT_TRUE(line(bwd, name)->pass()) << name << ": abs " << line(bwd, name)->abs_l2 << ", noise "
                                           << line(bwd, name)->noise_l2;
    }

    // dQ off by a tenth of its typical size (about 1 here): the noise allowed is about 1% of it
    // in bf16 and 2e-6 in f32.
    std::vector<double> dq = w.to_double(Tensor::dq);
    for (double& x : dq) x += 0.1;
    w.set_values(Tensor::dq, dq);
    VerifyReport off;
    ASSERT_TRUE(verify_backward(w, {}, {}, &off).ok());
    EXPECT_FALSE(line(off, "dq")->pass());
    EXPECT_TRUE(line(off, "dk")->pass());
  }
}

TEST(Verify, LargeProblemsAreSampled) {
  Workload w(spec());
  w.fill_inputs(memattn::testing::next_seed());
  w.poison_outputs();
  ASSERT_TRUE(forward(w.forward_args()).ok());
  EXPECT_TRUE(sample_selection(w, 1e12).sequences.empty()) << "under the budget: everything";
  const reference::Selection sel = sample_selection(w, 0);
  EXPECT_EQ(sel.sequences, (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(sel.kv_heads, (std::vector<std::int64_t>{0, 1}));
  // Sequence 1 is outside the sample: an unwritten element there passes the sampled check only.
  poke(w, Tensor::out, (1 * 33 + 5) * 4 * 16, std::numeric_limits<float>::quiet_NaN());
  VerifyReport sampled, all;
  ASSERT_TRUE(verify_forward(w, sel, {}, &sampled).ok());
  ASSERT_TRUE(verify_forward(w, {}, {}, &all).ok());
  EXPECT_EQ(sampled.scope, "sampled: sequences 0,2, kv heads 0,1");
  EXPECT_TRUE(sampled.pass());
  EXPECT_FALSE(all.pass());
  // The same element in sequence 2 is inside it.
  poke(w, Tensor::out, (2 * 33 + 5) * 4 * 16, std::numeric_limits<float>::quiet_NaN());
  VerifyReport caught;
  ASSERT_TRUE(verify_forward(w, sel, {}, &caught).ok());
  EXPECT_FALSE(caught.pass());
}

// Writes one float32 element of a host buffer at element offset `e`, bit for bit.
void poke_bits(Workload& w, Tensor t, std::int64_t e, float value) {
  std::memcpy(w.host(t).bytes.data() + 4 * e, &value, 4);
}

// A KV cache's forward: the reference, taken before the call, matches the call's output; the
// cache after it is the one before with the new keys at their slots, checked bit for bit, so an
// append missed, misplaced or spilled into a slot that no new key owns fails its line.
TEST(Verify, KvCacheOutputAndAppend) {
  for (CacheLayout layout : {CacheLayout::paged, CacheLayout::contiguous}) {
    SCOPED_TRACE(to_string(layout));
    ProblemSpec s = spec();
    s.bias.reset();
    s.seqlen_q = 5;
    s.mask = Mask::causal(Alignment::bottom_right);
    s.cache = {layout, 7, 19, 3};
    Workload w(s);
    w.fill_inputs(memattn::testing::next_seed());
    w.poison_outputs();
    reference::ForwardResult ref;
    ASSERT_TRUE(forward_reference(w, {}, {}, &ref).ok());
    const CacheSnapshot before = snapshot_cache(w);

    VerifyReport missed;  // no call: no new key is in the cache
    check_cache_append(w, before, &missed);
    EXPECT_FALSE(line(missed, "k_cache")->pass());
    EXPECT_EQ(line(missed, "v_cache")->error.bad, s.batch * 3 * s.heads_k * s.head_dim_v);

    ASSERT_TRUE(forward(w.forward_args()).ok());
    VerifyReport ok;
    check_forward(w, {}, ref, &ok);
    check_cache_append(w, before, &ok);
    EXPECT_TRUE(ok.pass());
    for (const char* name : {"out", "lse", "k_cache", "v_cache"}) ASSERT_NE(line(ok, name), nullptr) << name;
    EXPECT_TRUE(line(ok, "k_cache")->exact);
    EXPECT_EQ(line(ok, "k_cache")->error.compared, w.host(Tensor::k).view.numel());

    // One element of a new key's slot off: k_cache alone fails.
    const TensorRef& k = w.host(Tensor::k).view;
    const auto [page, row] = w.cache_slot(1, 19 + 2);
    const std::int64_t at = page * k.strides[0] + row * k.strides[1] + 1 * k.strides[2] + 3;
    const float kept = reinterpret_cast<const float*>(w.host(Tensor::k).bytes.data())[at];
    poke_bits(w, Tensor::k, at, kept + 1.0f);
    VerifyReport off;
    check_cache_append(w, before, &off);
    EXPECT_FALSE(line(off, "k_cache")->pass());
    EXPECT_EQ(line(off, "k_cache")->error.bad, 1);
    EXPECT_NEAR(line(off, "k_cache")->error.max_abs, 1.0, 1e-5);
    EXPECT_TRUE(line(off, "v_cache")->pass());
    poke_bits(w, Tensor::k, at, kept);

    if (layout == CacheLayout::paged) {  // a write into the page that no sequence lists
      const std::vector<std::int32_t>& table = w.block_table();
      std::int64_t spare = 0;
      while (std::find(table.begin(), table.end(), std::int32_t(spare)) != table.end()) ++spare;
      poke_bits(w, Tensor::v, spare * w.host(Tensor::v).view.strides[0], 0.5f);
      VerifyReport spilled;
      check_cache_append(w, before, &spilled);
      EXPECT_FALSE(line(spilled, "v_cache")->pass());
      EXPECT_TRUE(line(spilled, "k_cache")->pass());
    }

    // A cached key that the call read differently from the reference: out fails.
    Workload changed(s);
    changed.fill_inputs(memattn::testing::next_seed());
    reference::ForwardResult changed_ref;
    ASSERT_TRUE(forward_reference(changed, {}, {}, &changed_ref).ok());
    const auto [p0, r0] = changed.cache_slot(0, 18);  // the last cached key of sequence 0
    const TensorRef& ck = changed.host(Tensor::k).view;
    for (std::int64_t e = 0; e < s.head_dim; ++e) poke_bits(changed, Tensor::k, p0 * ck.strides[0] + r0 * ck.strides[1] + e, 3.0f);
    ASSERT_TRUE(forward(changed.forward_args()).ok());
    VerifyReport stale;
    check_forward(changed, {}, changed_ref, &stale);
    EXPECT_FALSE(line(stale, "out")->pass()) << "relative error " << line(stale, "out")->error.rel_l2;
  }
}

}  // namespace
}  // namespace memattn::tools
