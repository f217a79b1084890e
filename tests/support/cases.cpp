#include "support/cases.hpp"

#include <cstdlib>
#include <cstring>

namespace memattn::testing {

tools::ProblemSpec problem_shape(std::int64_t b, std::int64_t mq, std::int64_t mk, std::int64_t hq, std::int64_t hk,
                                 std::int64_t d, std::int64_t dv) {
  tools::ProblemSpec s;
  s.batch = b;
  s.seqlen_q = mq;
  s.seqlen_k = mk;
  s.heads_q = hq;
  s.heads_k = hk;
  s.head_dim = d;
  s.head_dim_v = dv;
  return s;
}

tools::ProblemSpec packed_sequences(std::int64_t head_dim) {
  tools::ProblemSpec s;
  s.varlen_q = {300, 0, 77, 129, 20};
  s.varlen_k = {264, 50, 0, 200, 136};
  s.seqused_k = {200, 17, 0, 131, 136};
  s.varlen_outside = 5;
  s.heads_q = 4;
  s.heads_k = 2;
  s.head_dim = s.head_dim_v = head_dim;
  return s;
}

namespace {

tools::ProblemSpec base() {
  tools::ProblemSpec s;
  s.batch = 1;
  s.seqlen_q = s.seqlen_k = 64;
  s.heads_q = s.heads_k = 2;
  s.head_dim = s.head_dim_v = 32;
  return s;
}

tools::ProblemSpec with_mask(tools::ProblemSpec s, std::int64_t left, std::int64_t right, Alignment a) {
  s.mask = Mask::window(left, right, a);
  return s;
}

tools::ProblemSpec with_bias(tools::ProblemSpec s, tools::BiasKind kind) {
  s.bias = tools::bias_pattern(kind);
  return s;
}

tools::ProblemSpec varlen(std::vector<std::int32_t> q, std::vector<std::int32_t> k) {
  tools::ProblemSpec s = base();
  s.varlen_q = std::move(q);
  s.varlen_k = std::move(k);
  return s;
}

}  // namespace

std::vector<NamedCase> feature_cases(DType dtype, Backend backend) {
  using tools::BiasKind;
  constexpr auto TL = Alignment::top_left;
  constexpr auto BR = Alignment::bottom_right;
  std::vector<NamedCase> c = {
      // Shapes.
      {"single", problem_shape(1, 1, 1, 1, 1, 1, 1)},
      {"m17_n255_gqa", problem_shape(2, 17, 255, 4, 2, 24, 24)},
      {"m255_n17_dv72", problem_shape(1, 255, 17, 2, 2, 40, 72)},
      {"m1013", problem_shape(1, 1013, 1013, 1, 1, 64, 64)},
      {"d7_dv13", problem_shape(2, 50, 60, 2, 1, 7, 13)},
      {"d300", problem_shape(1, 64, 100, 1, 1, 300, 300)},
      {"d512_dv256", problem_shape(1, 33, 40, 2, 1, 512, 256)},
      {"d1000", problem_shape(1, 20, 30, 1, 1, 1000, 1000)},
      {"mqa", problem_shape(2, 40, 70, 8, 1, 16, 16)},
      {"empty_keys", problem_shape(1, 9, 0, 2, 2, 16, 16)},
      {"empty_queries", with_bias(problem_shape(2, 0, 9, 2, 2, 16, 16), BiasKind::dense)},
      // Masks; bottom-right with Mq > Mk leaves the first rows fully masked.
      {"causal_tl", with_mask(problem_shape(1, 100, 77, 2, 2, 32, 32), kUnbounded, 0, TL)},
      {"causal_br_fully_masked_rows", with_mask(problem_shape(1, 100, 77, 2, 2, 32, 32), kUnbounded, 0, BR)},
      {"causal_br_long_keys", with_mask(problem_shape(2, 50, 130, 2, 1, 32, 32), kUnbounded, 0, BR)},
      {"window_16_3", with_mask(problem_shape(1, 150, 150, 2, 2, 32, 32), 16, 3, TL)},
      {"window_band_1_0", with_mask(problem_shape(1, 70, 90, 1, 1, 32, 32), 1, 0, TL)},
      {"window_left_only", with_mask(problem_shape(1, 90, 70, 1, 1, 32, 32), 5, kUnbounded, TL)},
      {"window_br", with_mask(problem_shape(1, 70, 190, 2, 2, 32, 32), 10, 2, BR)},
      // Bias.
      {"bias_dense", with_bias(problem_shape(2, 65, 77, 2, 2, 32, 32), BiasKind::dense)},
      {"bias_broadcast_batch", with_bias(problem_shape(2, 40, 50, 2, 1, 32, 32), BiasKind::broadcast_batch)},
      {"bias_broadcast_heads", with_bias(problem_shape(2, 40, 50, 4, 2, 32, 32), BiasKind::broadcast_heads)},
      {"bias_row", with_bias(problem_shape(2, 40, 70, 2, 2, 32, 32), BiasKind::row)},
      {"bias_causal", with_bias(with_mask(problem_shape(1, 80, 80, 2, 2, 32, 32), kUnbounded, 0, TL), BiasKind::dense)},
      // Dropout.
      {"dropout", [] { auto s = problem_shape(2, 70, 90, 2, 1, 32, 24); s.dropout = {0.3, 1234, 7}; return s; }()},
      {"dropout_causal_bias", [] {
         auto s = with_bias(with_mask(problem_shape(1, 60, 60, 2, 2, 16, 16), kUnbounded, 0, BR), BiasKind::dense);
         s.dropout = {0.5, 99, 0};
         return s;
       }()},
      // Variable lengths, empty sequences included.
      {"varlen", varlen({5, 0, 70, 33}, {8, 12, 0, 64})},
      {"varlen_causal_br", with_mask(varlen({5, 30, 70}, {8, 12, 64}), kUnbounded, 0, BR)},
      {"varlen_seqused_k", [] { auto s = varlen({5, 30, 70}, {8, 12, 64}); s.seqused_k = {6, 12, 40}; return s; }()},
      // Packed rows before the first sequence and after the last: out 0, LSE -inf, zero gradients.
      {"varlen_rows_outside", [] {
         auto s = with_bias(varlen({5, 30, 70}, {8, 12, 64}), BiasKind::dense);
         s.varlen_outside = 7;
         s.seqused_k = {6, 12, 40};
         return s;
       }()},
      {"varlen_bias_dropout_gqa", [] {
         auto s = with_bias(varlen({17, 1, 40}, {20, 33, 9}), BiasKind::dense);
         s.heads_q = 4;
         s.heads_k = 2;
         s.dropout = {0.2, 5, 3};
         return s;
       }()},
      // Length bounds given: the CUDA backend leaves the lengths on the device (its kernels clamp,
      // a device kernel fills the rows outside); exact bounds, and looser ones under a larger bias.
      {"varlen_bounded_outside", [] {
         auto s = with_bias(varlen({5, 30, 70}, {8, 12, 64}), BiasKind::dense);
         s.varlen_outside = 7;
         s.seqused_k = {6, 12, 40};
         s.varlen_bound_slack = 0;
         return s;
       }()},
      {"varlen_bounded_loose", [] {
         auto s = with_bias(with_mask(varlen({17, 1, 40}, {20, 33, 9}), kUnbounded, 0, BR), BiasKind::dense);
         s.heads_q = 4;
         s.heads_k = 2;
         s.dropout = {0.2, 5, 3};
         s.varlen_bound_slack = 9;
         return s;
       }()},
      // Strides.
      {"kv_stride0", [] { auto s = problem_shape(3, 30, 40, 2, 2, 32, 32); s.kv_broadcast_batch = true; return s; }()},
      {"padded_strides", [] { auto s = with_bias(problem_shape(2, 30, 41, 2, 1, 20, 28), BiasKind::dense); s.padding = 3; return s; }()},
      // A window skips tiles, whose dbias no kernel writes: zeroed first, here element by element
      // (padded rows: dbias's memory has gaps).
      {"padded_window_bias", [] {
         auto s = with_bias(with_mask(problem_shape(2, 90, 110, 2, 2, 32, 32), 9, 2, TL), BiasKind::dense);
         s.padding = 3;
         return s;
       }()},
      {"bias_f32_expanded", [] {
         auto s = with_bias(problem_shape(2, 30, 40, 2, 2, 32, 32), BiasKind::broadcast_heads);
         s.bias_f32 = true;
         s.bias_expanded = true;
         return s;
       }()},
      // 200 keys: whole unmasked key tiles, where the forward applies a positive scale in the
      // softmax and any other scale before it.
      {"scale", [] { auto s = problem_shape(1, 40, 200, 2, 2, 32, 32); s.scale = 0.37; return s; }()},
      {"scale_negative", [] { auto s = problem_shape(1, 40, 200, 2, 2, 32, 32); s.scale = -0.37; return s; }()},
      {"scale_zero_causal_br", [] { auto s = with_mask(problem_shape(1, 40, 200, 2, 2, 32, 32), kUnbounded, 0, BR); s.scale = 0.0; return s; }()},
      // Everything at once.
      {"all_features", [] {
         auto s = with_bias(with_mask(varlen({33, 0, 61}, {45, 7, 80}), 20, 4, BR), BiasKind::broadcast_batch);
         s.heads_q = 6;
         s.heads_k = 2;
         s.head_dim = 40;
         s.head_dim_v = 24;
         s.dropout = {0.25, 77, 11};
         s.seqused_k = {40, 7, 66};
         s.padding = 2;
         return s;
       }()},
  };
  const char* forced = backend == Backend::cuda ? std::getenv("MEMATTN_TEST_KERNEL") : nullptr;
  for (NamedCase& n : c) {
    n.spec.dtype = dtype;
    n.spec.backend = backend;
    if (forced != nullptr && *forced != '\0')
      (std::strncmp(forced, "bwd_", 4) == 0 ? n.spec.backward_overrides : n.spec.forward_overrides).kernel = forced;
  }
  return c;
}

std::vector<NamedCase> named_cases(Backend backend, std::initializer_list<DType> dtypes) {
  std::vector<NamedCase> out;
  for (DType dt : dtypes)
    for (NamedCase& c : feature_cases(dt, backend)) {
      c.name = std::string(to_string(dt)) + "_" + c.name;
      out.push_back(c);
    }
  return out;
}

}  // namespace memattn::testing
