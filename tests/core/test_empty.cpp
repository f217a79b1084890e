// Defined results at the legal edges (the library's part; the op's are in tests/python): empty
// problems return at once with defined outputs, null data pointers are allowed for tensors with
// zero elements, D = 0 is refused by name, packed rows outside every sequence give out 0, LSE -inf
// and zero gradients, windows of any size are exact, and non-finite inputs propagate as float64
// math attention does (no crash).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>
#include <limits>
#include <string>
#include <vector>

#include "memattn/attention.hpp"
#include "memattn/reference.hpp"

namespace memattn::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::int64_t count(std::initializer_list<std::int64_t> sizes) {
  std::int64_t n = 1;
  for (std::int64_t s : sizes) n *= s;
  return n;
}

// A host f32 tensor: poisoned with NaN, or null when `null_if_empty` and it has no elements.
struct Host {
  std::vector<float> data;
  TensorRef ref;
  Host(std::initializer_list<std::int64_t> sizes, bool null_if_empty = true, float fill = kNaN)
      : data(std::size_t(count(sizes)), fill) {
    ref = make_tensor(data.empty() && null_if_empty ? nullptr : data.data(), DType::f32, sizes);
  }
};

struct Shape {
  std::int64_t b, mq, mk, hq, hk, d, dv;
};

struct Fwd {
  Host q, k, v, out, lse;
  explicit Fwd(const Shape& s)
      : q({s.b, s.mq, s.hq, s.d}, true, 0.5f), k({s.b, s.mk, s.hk, s.d}, true, 0.25f),
        v({s.b, s.mk, s.hk, s.dv}, true, 1.0f), out({s.b, s.mq, s.hq, s.dv}), lse({s.b, s.hq, s.mq}) {}
  ForwardArgs args(Backend backend = Backend::cpu) {
    ForwardArgs a;
    a.backend = backend;
    a.q = q.ref, a.k = k.ref, a.v = v.ref, a.out = out.ref, a.lse = lse.ref;
    return a;
  }
};

struct Bwd {
  Host q, k, v, out, lse, dout, dq, dk, dv;
  explicit Bwd(const Shape& s)
      : q({s.b, s.mq, s.hq, s.d}, true, 0.5f), k({s.b, s.mk, s.hk, s.d}, true, 0.25f),
        v({s.b, s.mk, s.hk, s.dv}, true, 1.0f), out({s.b, s.mq, s.hq, s.dv}, true, 1.0f),
        lse({s.b, s.hq, s.mq}, true, 0.0f), dout({s.b, s.mq, s.hq, s.dv}, true, 1.0f), dq({s.b, s.mq, s.hq, s.d}),
        dk({s.b, s.mk, s.hk, s.d}), dv({s.b, s.mk, s.hk, s.dv}) {}
  BackwardArgs args(Backend backend = Backend::cpu) {
    BackwardArgs a;
    a.backend = backend;
    a.q = q.ref, a.k = k.ref, a.v = v.ref, a.out = out.ref, a.lse = lse.ref, a.dout = dout.ref;
    a.dq = dq.ref, a.dk = dk.ref, a.dv = dv.ref;
    return a;
  }
};

void expect_all(const std::vector<float>& xs, float want, const char* what) {
  for (std::size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(xs[i], want) << what << "[" << i << "]";
}

const Backend kHostBackends[] = {Backend::cpu, Backend::reference};

// #8: B = 0 in the backward divided by a zero pair count (SIGFPE) in the CPU backend.
TEST(EmptyProblem, BackwardWithEmptyBatch) {
  for (bool null_pointers : {true, false}) {
    const Shape s{0, 5, 7, 2, 1, 8, 8};
    Bwd b(s);
    BackwardArgs a = b.args();
    if (!null_pointers) {  // empty tensors may also come with a non-null pointer
      static float dummy[1];
      for (TensorRef* t : {&a.q, &a.k, &a.v, &a.out, &a.lse, &a.dout, &a.dq, &a.dk, &a.dv}) t->data = dummy;
    }
    for (bool deterministic : {false, true}) {
      a.deterministic = deterministic;
      const Status st = backward(a);
      EXPECT_TRUE(st.ok()) << st.to_string();
    }
    Fwd f(s);
    EXPECT_TRUE(forward(f.args()).ok());
  }
}

// #9: Mk = 0 and Mq > 0: out = 0 and LSE = -inf; the backward's dq = 0. k and v may be null.
TEST(EmptyProblem, NoKeysGiveZeroOutAndMinusInfLse) {
  for (Backend be : kHostBackends) {
    const Shape s{2, 3, 0, 4, 2, 8, 6};
    Fwd f(s);
    ASSERT_EQ(f.k.ref.data, nullptr);
    const Status st = forward(f.args(be));
    ASSERT_TRUE(st.ok()) << st.to_string();
    expect_all(f.out.data, 0.0f, "out");
    expect_all(f.lse.data, -kInf, "lse");
    Bwd b(s);
    const Status sb = backward(b.args(be));
    ASSERT_TRUE(sb.ok()) << sb.to_string();
    expect_all(b.dq.data, 0.0f, "dq");
  }
}

// Mq = 0 (or Hq = 0 with Hk > 0): the forward has nothing to write; dk = dv = 0 and dbias = 0.
TEST(EmptyProblem, NoQueriesGiveZeroKeyGradients) {
  for (Backend be : kHostBackends)
    for (Shape s : {Shape{2, 0, 5, 4, 2, 8, 6}, Shape{2, 5, 5, 0, 2, 8, 6}}) {
      Fwd f(s);
      ASSERT_TRUE(forward(f.args(be)).ok());
      Bwd b(s);
      BackwardArgs a = b.args(be);
      Host bias({1, 1, 1, s.mk}, true, 0.0f), dbias({1, 1, 1, s.mk});  // broadcast over b, h, rows
      a.bias = bias.ref;
      a.dbias = dbias.ref;
      const Status st = backward(a);
      ASSERT_TRUE(st.ok()) << st.to_string();
      expect_all(b.dk.data, 0.0f, "dk");
      expect_all(b.dv.data, 0.0f, "dv");
      expect_all(dbias.data, 0.0f, "dbias");
      std::size_t bytes = 1;
      EXPECT_TRUE(backward_workspace_size(a, &bytes).ok());
      EXPECT_EQ(bytes, 0u);
      std::string plan;
      EXPECT_TRUE(describe_plan(a, &plan).ok());
      EXPECT_NE(plan.find("empty"), std::string::npos) << plan;
    }
}

TEST(EmptyProblem, EveryTensorNullWhenEveryDimensionIsEmpty) {
  for (Shape s : {Shape{0, 0, 0, 0, 0, 4, 4}, Shape{1, 0, 0, 2, 2, 4, 4}}) {
    Fwd f(s);
    Bwd b(s);
    EXPECT_TRUE(forward(f.args(Backend::automatic)).ok());
    const Status st = backward(b.args(Backend::automatic));
    EXPECT_TRUE(st.ok()) << st.to_string();
    double flops = -1;
    EXPECT_TRUE(forward_flops(f.args(), &flops).ok());
    EXPECT_EQ(flops, 0.0);
  }
}

TEST(EmptyProblem, RefusalsStillNameTheArgument) {
  auto message = [](const Status& s) { return s.ok() ? std::string("(ok)") : s.message(); };
  {  // a null pointer for a tensor with elements
    Fwd f({1, 2, 3, 1, 1, 4, 4});
    ForwardArgs a = f.args();
    a.k.data = nullptr;
    EXPECT_NE(message(forward(a)).find("k: data pointer is null"), std::string::npos) << message(forward(a));
  }
  {  // D = 0 and Dv = 0 are refused, even in an otherwise empty problem
    Fwd f({0, 2, 3, 1, 1, 0, 4});
    EXPECT_NE(message(forward(f.args())).find("head dim D = 0"), std::string::npos) << message(forward(f.args()));
    Fwd g({1, 2, 3, 1, 1, 4, 0});
    EXPECT_NE(message(forward(g.args())).find("Dv = 0"), std::string::npos) << message(forward(g.args()));
    Bwd b({1, 2, 3, 1, 1, 0, 4});
    EXPECT_NE(message(backward(b.args())).find("D = 0"), std::string::npos) << message(backward(b.args()));
  }
  {  // Hk = 0 needs Hq = 0
    Fwd f({1, 2, 3, 2, 0, 4, 4});
    EXPECT_NE(message(forward(f.args())).find("Hk = 0"), std::string::npos) << message(forward(f.args()));
  }
  {  // the backward's lse is required where it has elements
    Bwd b({1, 2, 0, 1, 1, 4, 4});
    BackwardArgs a = b.args();
    a.lse = TensorRef{};
    EXPECT_NE(message(backward(a)).find("lse"), std::string::npos) << message(backward(a));
  }
}

// #14: a NaN or inf in q reaches the fast exp; the CPU backend gives NaN where float64 math
// attention (the reference backend) does, and the other rows as it does.
TEST(NonFinite, CpuForwardPropagatesLikeTheReference) {
  const Shape s{1, 4, 6, 1, 1, 4, 4};
  for (float bad : {kNaN, kInf, -kInf}) {
    Fwd cpu(s), ref(s);
    for (Fwd* f : {&cpu, &ref}) {
      for (std::size_t i = 0; i < f->q.data.size(); ++i) f->q.data[i] = 0.1f * float(i % 7) - 0.3f;
      for (std::size_t i = 0; i < f->k.data.size(); ++i) f->k.data[i] = 0.05f * float(i % 5) - 0.1f;
      for (std::size_t i = 0; i < f->v.data.size(); ++i) f->v.data[i] = 0.2f * float(i % 3) - 0.2f;
      f->q.data[1 * 4 + 2] = bad;  // row 1 of q
      f->q.data[3 * 4 + 0] = bad;  // row 3
      f->q.data[3 * 4 + 1] = bad;
    }
    ASSERT_TRUE(forward(cpu.args(Backend::cpu)).ok());
    ASSERT_TRUE(forward(ref.args(Backend::reference)).ok());
    for (std::size_t i = 0; i < cpu.out.data.size(); ++i) {
      const float c = cpu.out.data[i], r = ref.out.data[i];
      if (std::isnan(r)) {
        EXPECT_TRUE(std::isnan(c)) << "bad = " << bad << ", out[" << i << "] = " << c << ", reference NaN";
      } else {
        EXPECT_NEAR(c, r, 1e-5) << "bad = " << bad << ", out[" << i << "]";
      }
    }
    for (std::size_t i = 0; i < cpu.lse.data.size(); ++i) {
      const float c = cpu.lse.data[i], r = ref.lse.data[i];
      if (std::isnan(r)) EXPECT_TRUE(std::isnan(c)) << "lse[" << i << "] = " << c;
      else if (std::isinf(r)) EXPECT_EQ(c, r) << "lse[" << i << "]";
      else EXPECT_NEAR(c, r, 1e-5) << "lse[" << i << "]";
    }
  }
}

// #14: an extreme scale (1e308 in the CLI) is inf in float32, so scores are +-inf or NaN (inf * 0):
// defined, no crash (the fast exp's conversions ran into undefined behaviour, UBSan's abort). Where
// the float32 path gives a number it is the float64 reference's.
TEST(NonFinite, CpuForwardWithHugeScale) {
  const Shape s{1, 3, 5, 1, 1, 4, 4};
  Fwd cpu(s), ref(s);
  for (Fwd* f : {&cpu, &ref})
    for (std::size_t i = 0; i < f->k.data.size(); ++i) f->k.data[i] = 0.05f * float(i % 5) - 0.1f;
  // The float32 path gives NaN here, which the usual NaN poison of an output it never wrote would
  // hold too: a finite poison tells the two apart.
  constexpr float kUnwritten = 12345.0f;
  for (Host* h : {&cpu.out, &cpu.lse}) std::fill(h->data.begin(), h->data.end(), kUnwritten);
  ForwardArgs a = cpu.args(Backend::cpu), r = ref.args(Backend::reference);
  a.scale = r.scale = 1e308;
  ASSERT_TRUE(forward(a).ok());
  ASSERT_TRUE(forward(r).ok());
  for (std::size_t i = 0; i < cpu.out.data.size(); ++i) {
    EXPECT_NE(cpu.out.data[i], kUnwritten) << "out[" << i << "] not written";
    if (std::isnan(ref.out.data[i])) EXPECT_TRUE(std::isnan(cpu.out.data[i])) << i;
    else if (!std::isnan(cpu.out.data[i])) EXPECT_NEAR(cpu.out.data[i], ref.out.data[i], 1e-5) << i;
  }
  for (std::size_t i = 0; i < cpu.lse.data.size(); ++i)
    EXPECT_NE(cpu.lse.data[i], kUnwritten) << "lse[" << i << "] not written";
}

// Inputs with distinct, small values (no ties), so that the CPU path and the reference agree to
// float32 rounding.
void fill_inputs(Bwd* b) {
  for (std::size_t i = 0; i < b->q.data.size(); ++i) b->q.data[i] = 0.1f * float(i % 7) - 0.3f;
  for (std::size_t i = 0; i < b->k.data.size(); ++i) b->k.data[i] = 0.05f * float(i % 11) - 0.2f;
  for (std::size_t i = 0; i < b->v.data.size(); ++i) b->v.data[i] = 0.2f * float(i % 3) - 0.2f;
  for (std::size_t i = 0; i < b->dout.data.size(); ++i) b->dout.data[i] = 0.3f * float(i % 5) - 0.5f;
}

// Runs the forward (into b's out and lse) and then the backward on `be`, with variable lengths.
void run_varlen(Bwd* b, Backend be, const Varlen& vl, Mask mask = Mask::none()) {
  Fwd f(Shape{1, b->q.ref.sizes[1], b->k.ref.sizes[1], b->q.ref.sizes[2], b->k.ref.sizes[2], b->q.ref.sizes[3],
              b->v.ref.sizes[3]});
  f.q = b->q, f.k = b->k, f.v = b->v;
  f.q.ref.data = f.q.data.data(), f.k.ref.data = f.k.data.data(), f.v.ref.data = f.v.data.data();
  ForwardArgs fa = f.args(be);
  fa.varlen = vl, fa.mask = mask;
  fa.out = b->out.ref, fa.lse = b->lse.ref;
  const Status sf = forward(fa);
  ASSERT_TRUE(sf.ok()) << sf.to_string();
  BackwardArgs ba = b->args(be);
  ba.varlen = vl, ba.mask = mask;
  const Status sb = backward(ba);
  ASSERT_TRUE(sb.ok()) << sb.to_string();
}

// Rows [begin, end) of a [1, M, H, D] (or [1, H, M] when `lse`) host tensor, all equal to `want`.
void expect_rows(const Host& t, std::int64_t begin, std::int64_t end, float want, const char* what, bool lse = false) {
  const TensorRef& r = t.ref;
  for (std::int64_t i = begin; i < end; ++i)
    for (std::int64_t h = 0; h < r.sizes[lse ? 1 : 2]; ++h)
      for (std::int64_t d = 0; d < (lse ? 1 : r.sizes[3]); ++d) {
        const std::int64_t off = lse ? h * r.strides[1] + i * r.strides[2] : i * r.strides[1] + h * r.strides[2] + d;
        ASSERT_EQ(t.data[std::size_t(off)], want) << what << " row " << i << " head " << h << " col " << d;
      }
}

// #1: q has 10 packed rows and k 11, but the sequences cover query rows 2..6 and keys 1..8. The
// rows outside (the outputs were poisoned with NaN) get out 0, LSE -inf and zero gradients, and
// the covered rows match between the CPU path and the float64 reference.
TEST(VarlenEdges, RowsOutsideEverySequence) {
  const Shape s{1, 10, 11, 2, 1, 8, 8};
  static std::int32_t starts_q[3] = {2, 3, 7}, starts_k[3] = {1, 4, 9};
  const Varlen vl{make_index(starts_q, 3), make_index(starts_k, 3), {}};
  Bwd cpu(s), ref(s);
  for (Bwd* b : {&cpu, &ref}) fill_inputs(b);
  run_varlen(&cpu, Backend::cpu, vl);
  run_varlen(&ref, Backend::reference, vl);
  for (Bwd* b : {&cpu, &ref}) {
    for (auto [begin, end] : {std::pair{0, 2}, std::pair{7, 10}}) {
      expect_rows(b->out, begin, end, 0.0f, "out");
      expect_rows(b->lse, begin, end, -kInf, "lse", true);
      expect_rows(b->dq, begin, end, 0.0f, "dq");
    }
    for (auto [begin, end] : {std::pair{0, 1}, std::pair{9, 11}}) {
      expect_rows(b->dk, begin, end, 0.0f, "dk");
      expect_rows(b->dv, begin, end, 0.0f, "dv");
    }
  }
  for (const auto& [c, r, what] : {std::tuple{&cpu.out, &ref.out, "out"}, std::tuple{&cpu.dq, &ref.dq, "dq"},
                                   std::tuple{&cpu.dk, &ref.dk, "dk"}, std::tuple{&cpu.dv, &ref.dv, "dv"}})
    for (std::size_t i = 0; i < c->data.size(); ++i) {
      ASSERT_TRUE(std::isfinite(c->data[i])) << what << "[" << i << "]";
      ASSERT_NEAR(c->data[i], r->data[i], 1e-5) << what << "[" << i << "]";
    }
}

// #3: seqstarts of one element describe no sequence: every packed row is outside, as above.
TEST(VarlenEdges, NoSequence) {
  const Shape s{1, 4, 5, 2, 2, 8, 8};
  static std::int32_t zero[1] = {0};
  const Varlen vl{make_index(zero, 1), make_index(zero, 1), {}};
  for (Backend be : kHostBackends) {
    Bwd b(s);
    fill_inputs(&b);
    run_varlen(&b, be, vl);
    expect_all(b.out.data, 0.0f, "out");
    expect_all(b.lse.data, -kInf, "lse");
    for (const Host* g : {&b.dq, &b.dk, &b.dv}) expect_all(g->data, 0.0f, "gradient");
  }
}

// #6: window sides far beyond the sequences (up to INT64_MAX - 1; -1 is kUnbounded) limit nothing:
// the results are bit-identical to the unbounded mask on that side, with no overflow on the way.
TEST(VarlenEdges, HugeWindowsLimitNothing) {
  const Shape s{1, 9, 13, 2, 1, 8, 8};
  static std::int32_t starts_q[3] = {0, 4, 9}, starts_k[3] = {0, 6, 13};
  const Varlen vl{make_index(starts_q, 3), make_index(starts_k, 3), {}};
  constexpr std::int64_t kHuge = std::numeric_limits<std::int64_t>::max() - 1;
  for (Alignment al : {Alignment::top_left, Alignment::bottom_right})
    for (auto [huge, plain] : {std::pair{Mask::window(kHuge, 0, al), Mask::causal(al)},
                               std::pair{Mask::window(kHuge, kHuge, al), Mask::none()},
                               std::pair{Mask::window(2, kHuge, al), Mask::window(2, kUnbounded, al)}}) {
      plain.alignment = al;
      Bwd a(s), b(s);
      fill_inputs(&a), fill_inputs(&b);
      run_varlen(&a, Backend::cpu, vl, huge);
      run_varlen(&b, Backend::cpu, vl, plain);
      for (const auto& [x, y] : {std::pair{&a.out, &b.out}, std::pair{&a.lse, &b.lse}, std::pair{&a.dq, &b.dq},
                                 std::pair{&a.dk, &b.dk}, std::pair{&a.dv, &b.dv}}) {
        // Both start as NaN bytes: two runs that left an element unwritten would compare equal.
        for (std::size_t i = 0; i < x->data.size(); ++i) ASSERT_FALSE(std::isnan(x->data[i])) << "element " << i;
        ASSERT_EQ(0, std::memcmp(x->data.data(), y->data.data(), x->data.size() * sizeof(float)));
      }
    }
}

// Fuzzing found: a bias dimension of size 0 with stride 0 was taken for a broadcast one, and the
// CPU backward wrote a dbias element per row into a dbias with no elements (heap overflow).
// Varlen with every seqused_k 0: Mk = 0 in every sequence, bias [3, 1, 6, 0] strides [6, 6, 1, 0].
TEST(VarlenEdges, DbiasWithoutElementsIsNotWritten) {
  const Shape s{1, 6, 3, 2, 1, 8, 8};
  static std::int32_t starts_q[4] = {0, 2, 4, 6}, starts_k[4] = {0, 1, 2, 3}, used[3] = {0, 0, 0};
  const Varlen vl{make_index(starts_q, 4), make_index(starts_k, 4), make_index(used, 3)};
  for (Backend be : kHostBackends) {
    Bwd b(s);
    fill_inputs(&b);
    std::vector<float> bias(8, 0.5f), dbias(8, kNaN);  // room past the views: any write shows
    BackwardArgs a = b.args(be);
    a.varlen = vl;
    a.bias = make_tensor(bias.data(), DType::f32, {3, 1, 6, 0}, {6, 6, 1, 0});
    a.dbias = make_tensor(dbias.data(), DType::f32, {3, 1, 6, 0}, {6, 6, 1, 0});
    a.lse = b.lse.ref;
    for (float& x : b.lse.data) x = -kInf;  // no row sees a key
    const Status st = backward(a);
    ASSERT_TRUE(st.ok()) << st.to_string();
    for (float x : dbias) EXPECT_TRUE(std::isnan(x)) << "dbias storage was written";
    expect_all(b.dq.data, 0.0f, "dq");
  }
}

// Fuzzing found (the last four): forward_flops looped over a batch of 2^40; the pair count of
// 2^40 rows by 2^31 keys was converted to int64 (undefined); the reference divided by Hk = 0 and
// sized index lists by a huge Hk before noticing the problem was empty. Views claim the sizes;
// nothing is read.
TEST(EmptyProblem, HugeCountsAndTheReferenceOnEmptyProblems) {
  static float a[64], b[64];
  const std::int64_t B = std::int64_t(1) << 40;
  ForwardArgs f;
  f.q = f.k = f.v = make_tensor(a, DType::f32, {B, 1, 1, 1}, {0, 1, 1, 1});
  f.out = make_tensor(b, DType::f32, {B, 1, 1, 1}, {1, 1, 1, 1});
  double flops = -1;
  ASSERT_TRUE(forward_flops(f, &flops).ok());
  EXPECT_EQ(flops, 2.0 * double(B) * 2.0);  // one pair per batch entry, D + Dv = 2

  ForwardArgs g;
  g.q = g.out = make_tensor(nullptr, DType::f32, {1, std::int64_t(1) << 40, 0, 1});
  g.k = g.v = make_tensor(nullptr, DType::f32, {1, 2147483647, 0, 1});
  ASSERT_TRUE(forward_flops(g, &flops).ok());
  EXPECT_EQ(flops, 0.0);

  BackwardArgs h;
  h.q = h.dq = h.out = h.dout = h.k = h.v = h.dk = h.dv = make_tensor(nullptr, DType::f32, {1, 2, 0, 4});
  h.lse = make_tensor(nullptr, DType::f32, {1, 0, 2});
  reference::BackwardResult rb;
  EXPECT_TRUE(reference::backward(h, &rb).ok());

  ForwardArgs r;
  r.q = r.out = make_tensor(nullptr, DType::f32, {0, 1, 0, 1});
  r.k = r.v = make_tensor(nullptr, DType::f32, {0, 1, std::int64_t(1) << 40, 1});
  reference::ForwardResult rf;
  EXPECT_TRUE(reference::forward(r, &rf).ok());
  EXPECT_TRUE(rf.out.empty());
}

}  // namespace
}  // namespace memattn::testing
