#include "cli/flags.hpp"

#include <sstream>

namespace memattn::cli {
namespace {

Status bad(const std::string& message) { return {StatusCode::invalid_argument, message}; }

Status parse_lengths(const std::string& text, const char* flag, std::vector<std::int32_t>* out) {
  out->clear();
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < 0 || v > (1ll << 30)) throw std::invalid_argument(item);
      out->push_back(std::int32_t(v));
    } catch (...) {
      return bad(std::string(flag) + ": '" + item + "' is not a length (a non-negative integer)");
    }
  }
  if (out->empty()) return bad(std::string(flag) + ": expected a comma-separated list of lengths");
  return Status::Ok();
}

// --kernel, --no-l2-groups, --no-tail-split: each row goes to the pass its name says (fwd_, bwd_);
// the library checks that the build has it and that it can run the problem.
Status parse_overrides(const ProblemFlags& f, tools::ProblemSpec* s) {
  for (const std::string& name : f.kernels) {
    const bool backward = name.rfind("bwd_", 0) == 0;
    if (!backward && name.rfind("fwd_", 0) != 0)
      return bad("--kernel: '" + name + "' is not a kernel-table row name (fwd_... or bwd_...; `memattn kernels` " +
                 "lists them)");
    KernelOverrides& o = backward ? s->backward_overrides : s->forward_overrides;
    if (!o.kernel.empty())
      return bad("--kernel: " + o.kernel + " and " + name + " are both " + (backward ? "backward" : "forward") +
                 " rows; force at most one row per pass");
    o.kernel = name;
  }
  for (KernelOverrides* o : {&s->forward_overrides, &s->backward_overrides}) {
    o->l2_sized_groups = !f.no_l2_groups;
    o->split_last_wave = !f.no_tail_split;
  }
  return Status::Ok();
}

}  // namespace

void add_problem_flags(CLI::App* app, ProblemFlags* f) {
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag wins
  f->size_options[0] = app->add_option("--batch", f->batch, "Batch size B")->check(CLI::PositiveNumber);
  f->size_options[1] = app->add_option("--seqlen-q", f->seqlen_q, "Query sequence length Mq")->check(CLI::NonNegativeNumber);
  f->size_options[4] = app->add_option("--seqlen-k", f->seqlen_k, "Key sequence length Mk (default: Mq)")->check(CLI::NonNegativeNumber);
  f->size_options[2] = app->add_option("--heads-q", f->heads_q, "Query heads Hq")->check(CLI::PositiveNumber);
  app->add_option("--heads-k", f->heads_k, "Key/value heads Hk (default: Hq; Hq % Hk == 0 for GQA)")->check(CLI::PositiveNumber);
  f->size_options[3] = app->add_option("--head-dim", f->head_dim, "Head dim D of q and k (1..65536)")->check(CLI::PositiveNumber);
  app->add_option("--head-dim-v", f->head_dim_v, "Head dim Dv of v and the output (default: D)")->check(CLI::PositiveNumber);
  app->add_option("--dtype", f->dtype, "Element type")->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  app->add_flag("--causal", f->causal, "Causal mask (window right = 0)");
  app->add_option("--alignment", f->alignment, "Diagonal of causal/window masks")
      ->check(CLI::IsMember({"top-left", "bottom-right"}));
  app->add_option("--window-left", f->window_left, "Keys visible left of the diagonal (default unbounded)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--window-right", f->window_right, "Keys visible right of the diagonal (default unbounded)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--bias", f->bias, "Additive bias")
      ->check(CLI::IsMember({"none", "dense", "broadcast-batch", "broadcast-heads", "row"}));
  app->add_option("--dropout", f->dropout, "Dropout probability p in [0, 1)")->check(CLI::Range(0.0, 1.0));
  app->add_option("--seed", f->seed, "Dropout seed");
  app->add_option("--offset", f->offset, "Dropout offset (< 2^32)");
  app->add_option("--scale", f->scale, "Softmax scale (default 1/sqrt(D))");
  app->add_option("--varlen", f->varlen, "Variable lengths: query length of each sequence, e.g. 100,7,513");
  app->add_option("--varlen-k", f->varlen_k, "Variable lengths: key length of each sequence (default: as --varlen)");
  app->add_option("--backend", f->backend, "Backend")->check(CLI::IsMember({"auto", "cpu", "cuda", "reference"}));
  app->add_flag("--deterministic", f->deterministic, "Bit-reproducible backward (no atomics)");
  // The dispatcher's overrides (Options::overrides), for A/B comparisons and debugging.
  app->add_option("--kernel", f->kernels,
                  "CUDA only: force a kernel-table row (`memattn kernels` lists them), the only one its pass may "
                  "run; a fwd_ row forces the forward, a bwd_ row the backward (give one "
                  "of each, repeated or comma-separated, to force both)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->delimiter(',');
  app->add_flag("--no-l2-groups", f->no_l2_groups,
                "CUDA only: keep the causal backward's work groups sized for load balance where they would "
                "shrink to fit L2");
  app->add_flag("--no-tail-split", f->no_tail_split,
                "CUDA only: run the one-pass backward's last wave of key tiles whole (no split over CTAs)");
}

void apply_backend_defaults(ProblemFlags* f, Backend backend) {
  // CPU: a problem that verifies in seconds. CUDA: one that fills an H100 (64 heads x 4096^2).
  const bool gpu = backend == Backend::cuda;
  const auto unset = [&](int i) { return f->size_options[i] == nullptr || f->size_options[i]->count() == 0; };
  if (unset(0)) f->batch = gpu ? 4 : 1;
  if (unset(1)) f->seqlen_q = gpu ? 4096 : 1024;
  if (unset(2)) f->heads_q = gpu ? 16 : 8;
  if (unset(3)) f->head_dim = gpu ? 128 : 64;
}

Status parse_backend(const std::string& text, Backend* backend) {
  if (text == "auto") *backend = Backend::automatic;
  else if (text == "cpu") *backend = Backend::cpu;
  else if (text == "cuda") *backend = Backend::cuda;
  else if (text == "reference") *backend = Backend::reference;
  else return bad("--backend: unknown backend '" + text + "'");
  return Status::Ok();
}

Status parse_dtype(const std::string& text, DType* dtype) {
  if (text == "fp32") *dtype = DType::f32;
  else if (text == "fp16") *dtype = DType::f16;
  else if (text == "bf16") *dtype = DType::bf16;
  else return bad("--dtype: unknown dtype '" + text + "'");
  return Status::Ok();
}

Status make_spec(const ProblemFlags& f, tools::ProblemSpec* spec) {
  tools::ProblemSpec s;
  s.batch = f.batch;
  s.seqlen_q = f.seqlen_q;
  s.seqlen_k = f.seqlen_k < 0 ? f.seqlen_q : f.seqlen_k;
  s.heads_q = f.heads_q;
  s.heads_k = f.heads_k < 0 ? f.heads_q : f.heads_k;
  s.head_dim = f.head_dim;
  s.head_dim_v = f.head_dim_v < 0 ? f.head_dim : f.head_dim_v;
  if (Status st = parse_dtype(f.dtype, &s.dtype); !st.ok()) return st;
  if (s.heads_q % s.heads_k != 0)
    return bad("--heads-k: query heads (" + std::to_string(s.heads_q) + ") must be a multiple of kv heads (" +
               std::to_string(s.heads_k) + ")");
  if (f.causal && f.window_right != kUnbounded && f.window_right != 0)
    return bad("--causal: it means --window-right 0; give one or the other");
  s.mask.window_left = f.window_left;
  s.mask.window_right = f.causal ? 0 : f.window_right;
  s.mask.alignment = f.alignment == "bottom-right" ? Alignment::bottom_right : Alignment::top_left;
  tools::BiasKind kind;
  if (!tools::parse_bias_kind(f.bias, &kind)) return bad("--bias: unknown kind '" + f.bias + "'");
  s.bias = tools::bias_pattern(kind);
  s.dropout = Dropout{f.dropout, f.seed, f.offset};
  s.scale = f.scale;
  s.deterministic = f.deterministic;
  if (Status st = parse_backend(f.backend, &s.backend); !st.ok()) return st;
  if (Status st = parse_overrides(f, &s); !st.ok()) return st;
  if (!f.varlen.empty()) {
    if (Status st = parse_lengths(f.varlen, "--varlen", &s.varlen_q); !st.ok()) return st;
    if (f.varlen_k.empty()) {
      s.varlen_k = s.varlen_q;
    } else if (Status st = parse_lengths(f.varlen_k, "--varlen-k", &s.varlen_k); !st.ok()) {
      return st;
    }
    if (s.varlen_k.size() != s.varlen_q.size())
      return bad("--varlen-k: " + std::to_string(s.varlen_k.size()) + " lengths, but --varlen has " +
                 std::to_string(s.varlen_q.size()));
  } else if (!f.varlen_k.empty()) {
    return bad("--varlen-k: needs --varlen (the query lengths)");
  }
  *spec = s;
  return Status::Ok();
}

}  // namespace memattn::cli
