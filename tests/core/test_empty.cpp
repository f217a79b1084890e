// Issue 30 #8, #9 and #14 (the library's part): empty problems are valid and return at once with
// defined outputs, null data pointers are allowed for tensors with zero elements, D = 0 is refused
// by name, and non-finite inputs propagate as float64 math attention does (no crash).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "memattn/attention.hpp"

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
  ForwardArgs a = cpu.args(Backend::cpu), r = ref.args(Backend::reference);
  a.scale = r.scale = 1e308;
  ASSERT_TRUE(forward(a).ok());
  ASSERT_TRUE(forward(r).ok());
  for (std::size_t i = 0; i < cpu.out.data.size(); ++i) {
    if (std::isnan(ref.out.data[i])) EXPECT_TRUE(std::isnan(cpu.out.data[i])) << i;
    else if (!std::isnan(cpu.out.data[i])) EXPECT_NEAR(cpu.out.data[i], ref.out.data[i], 1e-5) << i;
  }
}

}  // namespace
}  // namespace memattn::testing
