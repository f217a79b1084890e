// Validation and planning (src/core/problem.cpp): bad input gets a clear error naming the argument,
// before anything runs, with outputs untouched; good input gets the Problem the backends read
// (sizes, resolved backend, bias broadcast, dropout threshold, sequences, visible pairs).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "core/problem.hpp"
#include "support/cases.hpp"
#include "support/seed.hpp"
#include "workload/workload.hpp"

namespace memattn::testing {
namespace {

tools::ProblemSpec good_spec() {
  tools::ProblemSpec s = problem_shape(2, 9, 11, 4, 2, 8, 6);
  s.dtype = DType::bf16;
  s.bias = tools::bias_pattern(tools::BiasKind::dense);
  s.backend = Backend::cpu;
  return s;
}

struct Outputs {
  std::vector<std::vector<unsigned char>> bytes;
  explicit Outputs(const tools::Workload& w) {
    for (tools::Tensor t : {tools::Tensor::out, tools::Tensor::lse, tools::Tensor::dq, tools::Tensor::dk,
                            tools::Tensor::dv, tools::Tensor::dbias})
      bytes.push_back(w.host(t).bytes);
  }
};

// Applies `breakit` to valid forward and backward args; both calls must fail with `code`, name
// `needle` in the message, and leave every output byte as it was.
void expect_rejected(const std::function<void(ForwardArgs&)>& fwd_break,
                     const std::function<void(BackwardArgs&)>& bwd_break, const std::string& needle,
                     StatusCode code = StatusCode::invalid_argument, tools::ProblemSpec spec = good_spec()) {
  tools::Workload w(spec);
  w.fill_inputs(next_seed());
  w.poison_outputs();
  const Outputs before(w);
  if (fwd_break) {
    ForwardArgs a = w.forward_args();
    fwd_break(a);
    const Status s = forward(a);
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << "message: " << s.message();
  }
  if (bwd_break) {
    BackwardArgs a = w.backward_args();
    bwd_break(a);
    const Status s = backward(a);
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << "message: " << s.message();
  }
  EXPECT_TRUE(Outputs(w).bytes == before.bytes) << "an output was written";
}

TEST(Validation, ValidArgumentsPass) {
  tools::Workload w(good_spec());
  w.fill_inputs(next_seed());
  EXPECT_TRUE(validate(w.forward_args()).ok());
  EXPECT_TRUE(validate(w.backward_args()).ok());
}

TEST(Validation, NullPointer) {
  expect_rejected([](ForwardArgs& a) { a.k.data = nullptr; }, [](BackwardArgs& a) { a.dout.data = nullptr; },
                  "data pointer is null");
  expect_rejected([](ForwardArgs& a) { a.out.data = nullptr; }, [](BackwardArgs& a) { a.dk.data = nullptr; }, "null");
}

TEST(Validation, WrongRank) {
  expect_rejected([](ForwardArgs& a) { a.q.rank = 3; }, [](BackwardArgs& a) { a.lse.rank = 4; }, "rank");
}

TEST(Validation, DtypeMismatch) {
  expect_rejected([](ForwardArgs& a) { a.v.dtype = DType::f16; }, [](BackwardArgs& a) { a.dq.dtype = DType::f32; },
                  "dtype");
  expect_rejected([](ForwardArgs& a) { a.lse.dtype = DType::bf16; }, nullptr, "lse: dtype");
  expect_rejected([](ForwardArgs& a) { a.bias.dtype = DType::f16; }, nullptr, "bias: dtype");
  expect_rejected([](ForwardArgs& a) { a.q.dtype = DType(7); }, nullptr, "unknown dtype");
  // With f32 q, "the dtype of q" and f32 are one choice: the message offers it once.
  tools::ProblemSpec f32 = good_spec();
  f32.dtype = DType::f32;
  f32.bias_f32 = true;
  tools::Workload w(f32);
  ForwardArgs a = w.forward_args();
  a.bias.dtype = DType::f64;
  EXPECT_EQ(validate(a).message(), "bias: dtype f64 must be f32 (the dtype of q)");
}

TEST(Validation, ShapeMismatch) {
  expect_rejected([](ForwardArgs& a) { a.k.sizes[3] = 7; }, [](BackwardArgs& a) { a.dv.sizes[1] = 3; }, "expected");
  expect_rejected([](ForwardArgs& a) { a.out.sizes[2] = 2; }, [](BackwardArgs& a) { a.dout.sizes[3] = 5; }, "expected");
  expect_rejected([](ForwardArgs& a) { a.lse.sizes[2] = 8; }, nullptr, "lse: expected");
  expect_rejected([](ForwardArgs& a) { a.q.sizes[0] = -1; }, nullptr, "negative size");
}

TEST(Validation, HeadsNotAMultiple) {
  expect_rejected([](ForwardArgs& a) { a.k.sizes[2] = a.v.sizes[2] = 3; }, nullptr, "multiple of kv heads");
}

TEST(Validation, HeadDimOutOfRange) {
  expect_rejected([](ForwardArgs& a) { a.q.sizes[3] = a.k.sizes[3] = 65537; }, nullptr, "outside [1, 65536]");
}

TEST(Validation, LastDimensionNotContiguous) {
  expect_rejected([](ForwardArgs& a) { a.q.strides[3] = 2; }, [](BackwardArgs& a) { a.dq.strides[3] = 2; },
                  "contiguous");
}

TEST(Validation, NegativeStride) {
  expect_rejected([](ForwardArgs& a) { a.k.strides[1] = -a.k.strides[1]; }, nullptr, "negative");
}

TEST(Validation, OverlappingOutputs) {
  expect_rejected([](ForwardArgs& a) { a.out.strides[1] = 0; }, [](BackwardArgs& a) { a.dk.strides[0] = 0; },
                  "overlap");
  expect_rejected([](ForwardArgs& a) { a.out.strides[2] = 1; }, nullptr, "overlap");
}

TEST(Validation, SizesOverflowInt64) {
  expect_rejected(
      [](ForwardArgs& a) {
        a.q.sizes[1] = std::int64_t(1) << 40;
        a.q.strides[1] = std::int64_t(1) << 40;
      },
      nullptr, "overflow");
}

TEST(Validation, BiasDoesNotBroadcast) {
  expect_rejected([](ForwardArgs& a) { a.bias.sizes[3] = 5; }, nullptr, "bias: dimension 3");
  expect_rejected([](ForwardArgs& a) { a.bias.sizes[0] = 3; }, nullptr, "bias: dimension 0");
}

TEST(Validation, DbiasWithoutBiasOrWrongShape) {
  expect_rejected(nullptr, [](BackwardArgs& a) { a.bias = TensorRef{}; }, "dbias: given without a bias");
  expect_rejected(nullptr, [](BackwardArgs& a) { a.dbias.sizes[2] = 1; }, "dbias: expected");
}

TEST(Validation, DbiasMustSumBroadcastDimensions) {
  tools::ProblemSpec s = good_spec();
  s.bias = tools::bias_pattern(tools::BiasKind::broadcast_heads);
  s.bias_expanded = true;
  expect_rejected(nullptr, [](BackwardArgs& a) { a.dbias.strides[1] = 1; }, "dbias: dimension 1",
                  StatusCode::invalid_argument, s);
}

TEST(Validation, LseRequiredByBackward) {
  expect_rejected(nullptr, [](BackwardArgs& a) { a.lse = TensorRef{}; }, "lse: is required");
}

TEST(Validation, WindowValues) {
  expect_rejected([](ForwardArgs& a) { a.mask.window_left = -2; }, nullptr, "mask.window_left");
  expect_rejected(nullptr, [](BackwardArgs& a) { a.mask.window_right = -5; }, "mask.window_right");
  expect_rejected([](ForwardArgs& a) { a.mask.alignment = Alignment(3); }, nullptr, "mask.alignment");
}

TEST(Validation, DropoutRange) {
  expect_rejected([](ForwardArgs& a) { a.dropout.p = 1.0; }, [](BackwardArgs& a) { a.dropout.p = -0.1; },
                  "dropout.p");
  expect_rejected([](ForwardArgs& a) { a.dropout.p = std::numeric_limits<double>::quiet_NaN(); }, nullptr,
                  "dropout.p");
  expect_rejected(
      [](ForwardArgs& a) {
        a.dropout.p = 0.1;
        a.dropout.offset = std::uint64_t(1) << 32;
      },
      nullptr, "dropout.offset");
}

TEST(Validation, ScaleMustBeFinite) {
  expect_rejected([](ForwardArgs& a) { a.scale = std::numeric_limits<double>::infinity(); }, nullptr, "scale");
}

tools::ProblemSpec varlen_spec() {
  tools::ProblemSpec s = good_spec();
  s.bias.reset();
  s.varlen_q = {3, 0, 5};
  s.varlen_k = {4, 2, 6};
  return s;
}

TEST(Validation, VarlenSeqstarts) {
  static std::int32_t descending[4] = {0, 3, 2, 8};
  static std::int32_t too_long[4] = {0, 4, 6, 13};
  static std::int32_t negative[4] = {-1, 3, 3, 8};
  static std::int32_t used[3] = {4, 3, 1};
  const auto spec = varlen_spec();
  expect_rejected([](ForwardArgs& a) { a.varlen.seqstart_q.data = descending; }, nullptr, "non-decreasing",
                  StatusCode::invalid_argument, spec);
  expect_rejected([](ForwardArgs& a) { a.varlen.seqstart_k.data = too_long; }, nullptr, "exceeds",
                  StatusCode::invalid_argument, spec);
  expect_rejected([](ForwardArgs& a) { a.varlen.seqstart_q.data = negative; }, nullptr, "negative",
                  StatusCode::invalid_argument, spec);
  expect_rejected(nullptr, [](BackwardArgs& a) { a.varlen.seqused_k = make_index(used, 3); }, "varlen.seqused_k[1]",
                  StatusCode::invalid_argument, spec);
}

// Table row #2 and #3 of the hostile-input issue: a description with a missing, short or unreadable
// array was read as raw memory, or silently ignored (seqused_k alone).
TEST(Validation, VarlenDescriptionsComplete) {
  static std::int32_t starts[4] = {0, 3, 3, 8};
  static std::int32_t used[3] = {1, 1, 1};
  const auto spec = varlen_spec();
  const auto reject = [&](std::function<void(ForwardArgs&)> f, const char* needle) {
    expect_rejected(f, nullptr, needle, StatusCode::invalid_argument, spec);
  };
  reject([](ForwardArgs& a) { a.varlen.seqstart_k = {}; }, "varlen.seqstart_k: is missing");
  reject([](ForwardArgs& a) { a.varlen.seqstart_q = {}; }, "varlen.seqstart_q: is missing, but varlen.seqstart_k");
  reject([](ForwardArgs& a) { a.varlen = {}, a.varlen.seqused_k = make_index(used, 3); },
         "varlen.seqstart_q: is missing, but varlen.seqused_k");
  reject([](ForwardArgs& a) { a.varlen.seqstart_k.size = 3; }, "varlen.seqstart_k: has 3 elements; it must have 4");
  reject([](ForwardArgs& a) { a.varlen.seqstart_q.size = 0; }, "varlen.seqstart_q: has 0 elements");
  reject([](ForwardArgs& a) { a.varlen.seqused_k = make_index(used, 2); }, "varlen.seqused_k: has 2 elements; it must have 3");
  reject([](ForwardArgs& a) { a.varlen.seqstart_q.data = nullptr; }, "varlen.seqstart_q: data pointer is null");
  reject([](ForwardArgs& a) { a.varlen.seqstart_q.stride = -1; }, "varlen.seqstart_q: stride -1 is negative");
  reject([](ForwardArgs& a) { a.varlen.seqstart_q = {starts, 4, std::int64_t(1) << 62}; }, "overflows");
}

// A strided seqstart is read through its stride on the host (the CUDA backend asks for stride 1).
TEST(Validation, VarlenStridedSeqstartIsReadThroughItsStride) {
  auto spec = varlen_spec();
  tools::Workload w(spec);
  w.fill_inputs(next_seed());
  ForwardArgs a = w.forward_args();
  std::vector<std::int32_t> spread(2 * std::size_t(a.varlen.seqstart_q.size));
  for (std::int64_t i = 0; i < a.varlen.seqstart_q.size; ++i) spread[std::size_t(2 * i)] = a.varlen.seqstart_q.data[i];
  detail::Problem contiguous, strided;
  ASSERT_TRUE(detail::build_problem(a, &contiguous).ok());
  a.varlen.seqstart_q = {spread.data(), a.varlen.seqstart_q.size, 2};
  ASSERT_TRUE(detail::build_problem(a, &strided).ok());
  EXPECT_EQ(contiguous.seqstart_q, strided.seqstart_q);
}

// Length bounds: checked against the values wherever these are read (always on the CPU); they
// size the problem (the grid, the bias), clamped to the packed rows.
TEST(Validation, VarlenBounds) {
  const auto spec = varlen_spec();  // query lengths 3, 0, 5 of 8 rows; keys 4, 2, 6 of 12
  const auto reject = [&](std::function<void(ForwardArgs&)> f, const char* needle) {
    expect_rejected(f, nullptr, needle, StatusCode::invalid_argument, spec);
  };
  reject([](ForwardArgs& a) { a.varlen.max_seqlen_q = -2; }, "varlen.max_seqlen_q: must be >= 0 or kUnknownLength, got -2");
  reject([](ForwardArgs& a) { a.varlen.max_seqlen_k = -5; }, "varlen.max_seqlen_k: must be >= 0");
  reject([](ForwardArgs& a) { a.varlen.max_seqlen_q = 4; }, "varlen.max_seqlen_q = 4 is less than the 5 query rows of sequence 2");
  reject([](ForwardArgs& a) { a.varlen.max_seqlen_k = 5, a.varlen.max_seqlen_q = 5; },
         "varlen.max_seqlen_k = 5 is less than the 6 used keys of sequence 2");

  tools::Workload w(spec);
  w.fill_inputs(next_seed());
  ForwardArgs a = w.forward_args();
  a.varlen.max_seqlen_q = 6;
  a.varlen.max_seqlen_k = 1000;
  detail::Problem p;
  ASSERT_TRUE(detail::build_problem(a, &p).ok());
  EXPECT_TRUE(p.lengths_known);  // host arrays are always read
  EXPECT_EQ(p.seqlen_q, 6);
  EXPECT_EQ(p.seqlen_k, 12);  // the packed keys
  a.varlen.max_seqlen_q = 0;  // every sequence empty: not so, and said so
  const Status s = detail::build_problem(a, &p);
  EXPECT_NE(s.message().find("varlen.max_seqlen_q = 0 is less than the 3 query rows of sequence 0"), std::string::npos)
      << s.to_string();

  // The bias covers the bounds, not only the lengths.
  auto biased = spec;
  biased.bias = tools::bias_pattern(tools::BiasKind::dense);
  expect_rejected([](ForwardArgs& f) { f.varlen.max_seqlen_q = 7; }, nullptr, "bias: dimension 2 has size 5",
                  StatusCode::invalid_argument, biased);
}

TEST(Validation, VarlenNeedsPackedBatch) {
  expect_rejected(
      [](ForwardArgs& a) {
        static std::int32_t starts[3] = {0, 4, 9};
        a.varlen = Varlen{make_index(starts, 3), make_index(starts, 3), {}};
      },
      nullptr, "batch dimension must be 1");
}

// Fuzzing found: a backend value outside the enum validated and ran on the CPU; a view whose
// largest offset is exactly INT64_MAX overflowed (UBSan) while its byte extent was computed.
TEST(Validation, UnknownBackendAndExtentAtInt64Max) {
  expect_rejected([](ForwardArgs& a) { a.backend = static_cast<Backend>(7); },
                  [](BackwardArgs& a) { a.backend = static_cast<Backend>(-1); }, "backend: unknown value");
  expect_rejected(
      [](ForwardArgs& a) {
        std::int64_t rest = 0;  // the largest offset within one batch entry
        for (int d = 1; d < 4; ++d) rest += (a.q.sizes[d] - 1) * a.q.strides[d];
        a.q.sizes[0] = 2;
        a.q.strides[0] = std::numeric_limits<std::int64_t>::max() - rest;
      },
      nullptr, "q: byte extent overflows 64 bits");
}

TEST(Validation, CudaBackendWithHostMemory) {
  expect_rejected([](ForwardArgs& a) { a.backend = Backend::cuda; }, [](BackwardArgs& a) { a.backend = Backend::cuda; },
                  "backend: cuda needs device memory");
}

// f64 runs on the reference alone: the fast backends refuse it (the API's test runs it).
TEST(Validation, Float64OnAFastBackend) {
  tools::ProblemSpec s = good_spec();
  s.dtype = DType::f64;
  s.backend = Backend::cpu;
  expect_rejected([](ForwardArgs&) {}, [](BackwardArgs&) {}, "f64 is supported by the reference backend only",
                  StatusCode::invalid_argument, s);
}

// overrides.kernel names a CUDA kernel-table row. The CPU and reference backends have none, so a
// name is refused there, before anything runs (a measurement must not run something other than
// what it names), whether or not the name is a row.
TEST(Validation, KernelOverrideNeedsTheCudaBackend) {
  for (const Backend backend : {Backend::cpu, Backend::automatic, Backend::reference}) {
    tools::ProblemSpec s = good_spec();
    s.backend = backend;
    SCOPED_TRACE(to_string(backend));
    expect_rejected([](ForwardArgs& a) { a.overrides.kernel = "fwd_sm80_bf16_d64_m128n64w4_vec_plain"; },
                    [](BackwardArgs& a) { a.overrides.kernel = "no_such_row"; }, "overrides.kernel",
                    StatusCode::invalid_argument, s);
    tools::Workload w(s);
    ForwardArgs a = w.forward_args();
    a.overrides.kernel = "fwd_sm80_bf16_d64_m128n64w4_vec_plain";
    EXPECT_NE(validate(a).message().find("applies to the CUDA backend only"), std::string::npos)
        << validate(a).message();
  }
}

// overrides.num_splits: 0 to 256, and the forward's alone.
TEST(Validation, NumSplitsOverride) {
  expect_rejected([](ForwardArgs& a) { a.overrides.num_splits = -1; },
                  [](BackwardArgs& a) { a.overrides.num_splits = 2; }, "overrides.num_splits");
  expect_rejected([](ForwardArgs& a) { a.overrides.num_splits = 257; }, nullptr, "must be 0 (the dispatcher's choice) or 1 to 256");
  expect_rejected(nullptr, [](BackwardArgs& a) { a.overrides.num_splits = 1; }, "applies to the forward only");
}

// The scheduling overrides have nothing to turn off on the CPU: accepted and ignored.
TEST(Validation, SchedulingOverridesAreIgnoredOffTheGpu) {
  tools::ProblemSpec s = good_spec();
  for (KernelOverrides* o : {&s.forward_overrides, &s.backward_overrides}) {
    o->l2_sized_groups = false;
    o->split_last_wave = false;
  }
  s.forward_overrides.num_splits = 7;
  tools::Workload w(s);
  w.fill_inputs(next_seed());
  const Status f = forward(w.forward_args());
  EXPECT_TRUE(f.ok()) << f.to_string();
  const Status b = backward(w.backward_args());
  EXPECT_TRUE(b.ok()) << b.to_string();
}

// The Problem the backends read, from a valid forward call.
detail::Problem planned(const ForwardArgs& args) {
  detail::Problem p;
  const Status s = detail::build_problem(args, &p);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return p;
}

TEST(Problem, DescribesTheCall) {
  tools::ProblemSpec s = good_spec();  // 2 x (9 queries, 11 keys), 4 / 2 heads, D 8, Dv 6, bf16, dense bias
  s.dropout = {0.25, 0x123456789ull, 5};
  tools::Workload w(s);
  w.fill_inputs(next_seed());
  const detail::Problem p = planned(w.forward_args());
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.heads_q, 4);
  EXPECT_EQ(p.heads_k, 2);
  EXPECT_EQ(p.group_size(), 2);
  EXPECT_EQ(p.head_dim, 8);
  EXPECT_EQ(p.head_dim_v, 6);
  EXPECT_EQ(p.seqlen_q, 9);
  EXPECT_EQ(p.seqlen_k, 11);
  EXPECT_FALSE(p.varlen);
  EXPECT_EQ(p.dtype, DType::bf16);
  EXPECT_DOUBLE_EQ(p.scale, 1 / std::sqrt(8.0));
  EXPECT_FALSE(p.is_masked());
  EXPECT_TRUE(p.has_bias);
  for (int d = 0; d < 4; ++d) EXPECT_FALSE(p.bias_broadcast[d]) << "dimension " << d;
  EXPECT_TRUE(p.has_dropout());
  EXPECT_EQ(p.dropout_threshold, 0x40000000u);
  EXPECT_EQ(p.dropout_seed, 0x123456789ull);
  EXPECT_EQ(p.dropout_offset, 5u);
  EXPECT_EQ(p.backend, Backend::cpu);
  const detail::Sequence seq = p.sequence(1);
  EXPECT_EQ(seq.batch, 1);
  EXPECT_EQ(seq.q_begin, 0);
  EXPECT_EQ(seq.q_len, 9);
  EXPECT_EQ(seq.k_begin, 0);
  EXPECT_EQ(seq.k_len, 11);
  EXPECT_EQ(p.visible_pairs(), 2.0 * 4 * 9 * 11);
}

TEST(Problem, ResolvesTheBackend) {
  tools::ProblemSpec s = good_spec();
  s.backend = Backend::automatic;
  {
    tools::Workload w(s);
    EXPECT_EQ(planned(w.forward_args()).backend, Backend::cpu) << "host memory: the fast CPU path";
  }
  s.dtype = DType::f64;
  {
    tools::Workload w(s);
    EXPECT_EQ(planned(w.forward_args()).backend, Backend::reference) << "f64: the reference";
  }
  s.dtype = DType::f32;
  s.backend = Backend::reference;
  tools::Workload w(s);
  EXPECT_EQ(planned(w.forward_args()).backend, Backend::reference);
}

// A bias dimension broadcasts when it has size 1 or stride 0 (torch's expand; not the last
// dimension, which must be contiguous); dbias then sums it.
TEST(Problem, BiasBroadcastDimensions) {
  for (const tools::BiasPattern pattern : {tools::BiasPattern{true, false, false, false}, tools::BiasPattern{false, true, true, false},
                                           tools::BiasPattern{true, true, false, true}})
    for (const bool expanded : {false, true}) {
      if (expanded && pattern[3]) continue;
      tools::ProblemSpec s = good_spec();
      s.bias = pattern;
      s.bias_expanded = expanded;
      tools::Workload w(s);
      SCOPED_TRACE(s.describe());
      detail::Problem p;
      const Status st = detail::build_problem(w.backward_args(), &p);
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_TRUE(p.has_bias);
      EXPECT_TRUE(p.has_dbias);
      for (int d = 0; d < 4; ++d) EXPECT_EQ(p.bias_broadcast[d], pattern[std::size_t(d)]) << "dimension " << d;
    }
}

// Variable lengths: one sequence per entry, rows from seqstart, keys cut by seqused_k; the masks'
// diagonal per sequence.
TEST(Problem, VarlenSequencesAndMask) {
  tools::ProblemSpec s = good_spec();
  s.bias.reset();
  s.varlen_q = {3, 0, 5};
  s.varlen_k = {4, 2, 6};
  s.seqused_k = {4, 1, 6};
  s.mask = Mask::causal(Alignment::bottom_right);
  tools::Workload w(s);
  const detail::Problem p = planned(w.forward_args());
  EXPECT_TRUE(p.varlen);
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.seqlen_q, 5);
  EXPECT_EQ(p.seqlen_k, 6);
  EXPECT_TRUE(p.is_masked());
  EXPECT_EQ(p.window_left, kUnbounded);
  EXPECT_EQ(p.window_right, 0);
  EXPECT_TRUE(p.bottom_right);
  const struct {
    std::int64_t q_begin, q_len, k_begin, k_len;
  } want[] = {{0, 3, 0, 4}, {3, 0, 4, 1}, {3, 5, 6, 6}};
  for (std::int64_t b = 0; b < 3; ++b) {
    const detail::Sequence seq = p.sequence(b);
    EXPECT_EQ(seq.batch, 0);
    EXPECT_EQ(seq.q_begin, want[b].q_begin) << "sequence " << b;
    EXPECT_EQ(seq.q_len, want[b].q_len) << "sequence " << b;
    EXPECT_EQ(seq.k_begin, want[b].k_begin) << "sequence " << b;
    EXPECT_EQ(seq.k_len, want[b].k_len) << "sequence " << b;
  }
  // Bottom-right causal: query i of a sequence sees keys j <= i + (k_len - q_len).
  EXPECT_EQ(p.visible_pairs(), 4.0 * ((2 + 3 + 4) + 0 + (2 + 3 + 4 + 5 + 6)));
}

// visible_pairs_of (closed form, used for FLOP counts and by the dispatcher) against counting
// each query's keys, over shapes, shifts and windows around every boundary.
TEST(Problem, VisiblePairsMatchCounting) {
  const auto counted = [](std::int64_t q_len, std::int64_t k_len, std::int64_t shift, std::int64_t left,
                          std::int64_t right) {
    std::int64_t pairs = 0;
    for (std::int64_t i = 0; i < q_len; ++i)
      for (std::int64_t j = 0; j < k_len; ++j) {
        const std::int64_t rel = j - (i + shift);
        if ((left == kUnbounded || rel >= -left) && (right == kUnbounded || rel <= right)) ++pairs;
      }
    return pairs;
  };
  const std::int64_t sides[] = {kUnbounded, 0, 1, 3, 17, 40};
  int checked = 0;
  for (std::int64_t q_len : {0, 1, 5, 17, 33})
    for (std::int64_t k_len : {0, 1, 4, 17, 40})
      for (std::int64_t shift : {std::int64_t(0), k_len - q_len, std::int64_t(-7), std::int64_t(9)})
        for (std::int64_t left : sides)
          for (std::int64_t right : sides) {
            EXPECT_EQ(detail::visible_pairs_of(q_len, k_len, shift, left, right), counted(q_len, k_len, shift, left, right))
                << "q_len " << q_len << " k_len " << k_len << " shift " << shift << " left " << left << " right "
                << right;
            ++checked;
          }
  EXPECT_EQ(checked, 5 * 5 * 4 * 6 * 6);
}

}  // namespace
}  // namespace memattn::testing
