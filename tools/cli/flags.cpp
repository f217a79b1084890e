#include "cli/flags.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "workload/checked.hpp"

namespace memattn::cli {
namespace {

Status bad(const std::string& message) { return {StatusCode::invalid_argument, message}; }

constexpr std::int64_t kMaxLength = std::int64_t(1) << 30;  // one sequence of --varlen / --varlen-k

Status parse_lengths(const std::string& text, const char* flag, std::vector<std::int32_t>* out) {
  out->clear();
  if (!text.empty() && text.back() == ',')
    return bad(std::string(flag) + ": '" + text + "' ends with a comma (a length is missing)");
  std::stringstream ss(text);
  std::string item;
  std::int64_t sum = 0;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < 0) throw std::invalid_argument(item);
      if (v > kMaxLength)
        return bad(std::string(flag) + ": a sequence of " + item + " is longer than the limit, 2^30 = " +
                   std::to_string(kMaxLength));
      out->push_back(std::int32_t(v));
      sum += v;  // at most 2^30 per item: cannot overflow before the check below trips
    } catch (...) {
      return bad(std::string(flag) + ": '" + item + "' is not a length (a non-negative integer)");
    }
    // The packed tensors are indexed by int32 seqstarts: the sum must fit in int32.
    if (sum > std::numeric_limits<std::int32_t>::max())
      return bad(std::string(flag) + ": the lengths sum to more than " +
                 std::to_string(std::numeric_limits<std::int32_t>::max()) +
                 " packed rows, the most that int32 seqstarts index (got " + std::to_string(sum) + " after " +
                 std::to_string(out->size()) + " sequences)");
  }
  if (out->empty()) return bad(std::string(flag) + ": expected a comma-separated list of lengths");
  return Status::Ok();
}

// Validators that check a flag's text before CLI11 converts it, so that the messages say the
// rule and the value (CLI11's own print DBL_MAX in 300 digits, or "Could not convert").
// CLI11 prefixes each message with the flag's name.
template <class T>
CLI::Validator integer_at_least(T lo, const char* hint = "", T hi = std::numeric_limits<T>::max()) {
  return CLI::Validator(
      [lo, hint, hi](std::string& text) -> std::string {
        T v{};
        const char* end = text.data() + text.size();
        const bool negative = !text.empty() && text[0] == '-';
        if (negative && std::is_unsigned<T>::value && text.size() > 1 &&
            text.find_first_not_of("0123456789", 1) == std::string::npos)
          return "must be >= 0, got " + text;  // from_chars would call it "not an integer"
        const auto r = std::from_chars(text.data(), end, v);
        if (text.empty() || (r.ec != std::errc() && r.ec != std::errc::result_out_of_range) || r.ptr != end)
          return "must be an integer, got '" + text + "'";
        if ((negative && std::is_unsigned<T>::value) || (r.ec == std::errc() && v < lo) ||
            (r.ec == std::errc::result_out_of_range && negative))
          return "must be >= " + std::to_string(lo) + ", got " + text;
        if (r.ec == std::errc::result_out_of_range)
          return "must be <= " + std::to_string(std::numeric_limits<T>::max()) + std::string(hint) + ", got " + text;
        if (v > hi) return "must be <= " + std::to_string(hi) + std::string(hint) + ", got " + text;
        text = std::to_string(v);  // decimal, as checked (CLI11 would read a leading 0 as octal)
        return std::string();
      },
      std::is_unsigned<T>::value ? "UINT>=" + std::to_string(lo) : "INT>=" + std::to_string(lo));
}

CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& text) { return text.empty() ? std::string("must not be empty") : std::string(); }, "");
}

// A floating-point value: finite, in [lo, hi) when a range is given.
CLI::Validator number_in(double lo, double hi, const char* rule) {
  return CLI::Validator(
      [lo, hi, rule](std::string& text) -> std::string {
        double v = 0;
        std::size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (...) {
          used = 0;
        }
        if (text.empty() || used != text.size()) return "must be a number, got '" + text + "'";
        if (!std::isfinite(v) || v < lo || v >= hi) return std::string("must be ") + rule + ", got " + text;
        return std::string();
      },
      "");
}

// --kernel, --no-l2-groups, --no-tail-split, --num-splits: each row goes to the pass its name says (fwd_, bwd_);
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
  s->forward_overrides.num_splits = f.num_splits;
  return Status::Ok();
}

// --kv-cache, --page-size, --cache-len, --new-keys. The keys each query attends to are --seqlen-k
// as without a cache: --cache-len defaults to it less the new keys, and when --cache-len is given
// --seqlen-k defaults to their sum. The features the library takes no cache with are refused
// here, naming their flags; a top-left mask is left to the library, whose message says why.
Status parse_cache(const ProblemFlags& f, tools::ProblemSpec* s) {
  if (f.kv_cache.empty()) {
    if (f.page_size.has_value()) return bad("--page-size: pages are a paged cache's; it needs --kv-cache paged");
    if (f.cache_len.has_value()) return bad("--cache-len: needs --kv-cache contiguous or paged");
    if (f.new_keys.has_value()) return bad("--new-keys: needs --kv-cache contiguous or paged");
    return Status::Ok();
  }
  const bool paged = f.kv_cache == "paged";
  if (!paged && f.kv_cache != "contiguous") return bad("--kv-cache: unknown layout '" + f.kv_cache + "'");
  if (f.page_size.has_value() && !paged)
    return bad("--page-size: pages are a paged cache's; it needs --kv-cache paged (got --kv-cache " + f.kv_cache + ")");
  if (!f.varlen.empty())
    return bad("--varlen: not with --kv-cache: the cache gives each sequence's keys (--cache-len, --new-keys) and q is "
               "[B, Mq, Hq, D]");
  if (!f.varlen_k.empty()) return bad("--varlen-k: not with --kv-cache (the cache gives each sequence's keys)");
  if (f.bias != "none") return bad("--bias: not with --kv-cache (the library takes no bias with a KV cache)");
  if (f.dropout != 0.0) return bad("--dropout: must be 0 with --kv-cache (inference: the library takes no dropout with a cache)");
  tools::CacheSpec& c = s->cache;
  c.layout = paged ? tools::CacheLayout::paged : tools::CacheLayout::contiguous;
  c.page_size = f.page_size.value_or(16);
  c.new_keys = f.new_keys.value_or(0);
  const std::string flag = f.cache_len.has_value() ? "--cache-len" : "--seqlen-k";
  if (f.cache_len.has_value()) {
    c.cache_len = *f.cache_len;
    std::int64_t keys = 0;
    if (!tools::checked_add(c.cache_len, c.new_keys, &keys))
      return bad("--cache-len: " + std::to_string(c.cache_len) + " cached plus " + std::to_string(c.new_keys) +
                 " new keys overflow 64 bits");
    if (f.seqlen_k >= 0 && f.seqlen_k != keys)
      return bad("--cache-len: " + std::to_string(c.cache_len) + " cached keys plus " + std::to_string(c.new_keys) +
                 " new ones (--new-keys) make " + std::to_string(keys) + " keys per sequence, but --seqlen-k says " +
                 std::to_string(f.seqlen_k) + "; leave --seqlen-k out or give their sum");
    s->seqlen_k = keys;
  } else {
    if (c.new_keys > s->seqlen_k)
      return bad("--new-keys: " + std::to_string(c.new_keys) + " new keys are more than the " +
                 std::to_string(s->seqlen_k) + " keys each query attends to (--seqlen-k, default --seqlen-q); give "
                 "--cache-len or a longer --seqlen-k");
    c.cache_len = s->seqlen_k - c.new_keys;
  }
  // kv_cache.seqlens and the block table's entries are int32.
  if (s->seqlen_k > std::numeric_limits<std::int32_t>::max())
    return bad(flag + ": " + std::to_string(s->seqlen_k) + " keys per sequence (cached and new) are more than " +
               std::to_string(std::numeric_limits<std::int32_t>::max()) + ", the most that int32 kv_cache.seqlens hold");
  tools::CacheShape shape;
  if (!tools::cache_shape(s->batch, c, &shape))
    return bad("--page-size: " + std::to_string(s->batch) + " sequences of " + std::to_string(s->seqlen_k) +
               " keys in pages of " + std::to_string(c.page_size) + " need more pages than int32 block-table "
               "entries name; give a larger --page-size");
  return Status::Ok();
}

}  // namespace

CLI::Validator count_at_least_zero() { return integer_at_least<int>(0); }
CLI::Validator non_empty_value() { return non_empty(); }

void clamp_windows(tools::ProblemSpec* s) {
  // A window as wide as the longest sequence (either side) hides no key: clamping it there gives
  // the same mask and keeps every later sum of a window and an index far from overflow.
  std::int64_t longest = std::max(s->seqlen_q, s->seqlen_k);
  if (s->varlen()) {
    longest = 0;
    for (const auto* lens : {&s->varlen_q, &s->varlen_k, &s->seqused_k})
      for (std::int32_t n : *lens) longest = std::max<std::int64_t>(longest, n);
  }
  for (std::int64_t* w : {&s->mask.window_left, &s->mask.window_right})
    if (*w != kUnbounded && *w > longest) *w = longest;
}

std::int64_t available_host_bytes(std::string* source) {
  *source = "unknown";
  std::int64_t avail = -1;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") {
      avail = kib * 1024;
      *source = "MemAvailable in /proc/meminfo";
      break;
    }
  }
  if (avail < 0) {
    const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) {
      avail = std::int64_t(pages) * page;
      *source = "free physical pages";
    }
  }
  // A cgroup (v2) limit below that is the one that counts.
  std::ifstream max_file("/sys/fs/cgroup/memory.max"), cur_file("/sys/fs/cgroup/memory.current");
  std::int64_t limit = 0, used = 0;
  if (max_file >> limit && cur_file >> used && limit > used && (avail < 0 || limit - used < avail)) {
    avail = limit - used;
    *source = "the cgroup's memory.max less memory.current";
  }
  return avail;
}

Status check_host_memory(const tools::ProblemSpec& s, bool loaded, std::int64_t limit) {
  std::int64_t needed = 0;
  const bool fits_int64 = tools::workload_bytes(s, &needed);
  std::string source = "the caller's limit";
  const std::int64_t avail = limit >= 0 ? limit : available_host_bytes(&source);
  if (fits_int64 && (avail < 0 || needed <= avail)) return Status::Ok();
  // Name the largest size: the flag to reduce.
  std::string culprit;
  if (loaded) {
    culprit = "--load";
  } else {
    std::vector<std::pair<std::string, std::int64_t>> sizes = {
        {"--batch", s.batch},       {"--seqlen-q", s.seqlen_q}, {"--seqlen-k", s.seqlen_k},     {"--heads-q", s.heads_q},
        {"--heads-k", s.heads_k},   {"--head-dim", s.head_dim}, {"--head-dim-v", s.head_dim_v}};
    if (s.varlen()) {
      std::int64_t tq = 0, tk = 0;
      for (std::int32_t n : s.varlen_q) tq += n;
      for (std::int32_t n : s.varlen_k) tk += n;
      sizes[0] = {"--varlen (rows in all:)", tq};
      sizes[1] = {"--varlen-k (rows in all:)", tk};
      sizes.erase(sizes.begin() + 2);
    } else if (s.cache.enabled()) {
      // The cache's tensors are sized by these rather than by --seqlen-k.
      sizes[2] = {"--cache-len", s.cache.cache_len};
      sizes.push_back({"--new-keys", s.cache.new_keys});
      if (s.cache.layout == tools::CacheLayout::paged) sizes.push_back({"--page-size", s.cache.page_size});
    }
    const auto largest = std::max_element(sizes.begin(), sizes.end(),
                                          [](const auto& a, const auto& b) { return a.second < b.second; });
    culprit = largest->first + " " + std::to_string(largest->second);
  }
  const std::string have = avail < 0 ? std::string("the memory available is unknown")
                                     : std::to_string(avail) + " bytes (" + tools::format_bytes(double(avail)) +
                                           ") are available (" + source + ")";
  const std::string need = fits_int64 ? std::to_string(needed) + " bytes (" + tools::format_bytes(double(needed)) + ")"
                                      : std::string("more than 2^63 bytes (the count overflows 64 bits)");
  return {StatusCode::invalid_argument, culprit + ": the problem does not fit in host memory: its tensors need " +
                                            need + ", " + have + " (problem: " + s.describe() + ")"};
}

void add_problem_flags(CLI::App* app, ProblemFlags* f) {
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag wins
  f->size_options[0] = app->add_option("--batch", f->batch, "Batch size B")->check(integer_at_least<std::int64_t>(1));
  f->size_options[1] = app->add_option("--seqlen-q", f->seqlen_q, "Query sequence length Mq")->check(integer_at_least<std::int64_t>(0));
  f->size_options[4] = app->add_option("--seqlen-k", f->seqlen_k, "Key sequence length Mk (default: Mq)")->check(integer_at_least<std::int64_t>(0));
  f->size_options[2] = app->add_option("--heads-q", f->heads_q, "Query heads Hq")->check(integer_at_least<std::int64_t>(1));
  app->add_option("--heads-k", f->heads_k, "Key/value heads Hk (default: Hq; Hq % Hk == 0 for GQA)")->check(integer_at_least<std::int64_t>(1));
  f->size_options[3] = app->add_option("--head-dim", f->head_dim, "Head dim D of q and k (1..65536)")->check(integer_at_least<std::int64_t>(1));
  app->add_option("--head-dim-v", f->head_dim_v, "Head dim Dv of v and the output (default: D)")->check(integer_at_least<std::int64_t>(1));
  app->add_option("--dtype", f->dtype, "Element type")->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  app->add_flag("--causal", f->causal, "Causal mask (window right = 0)");
  app->add_option("--alignment", f->alignment,
                  "Diagonal of causal/window masks (default top-left; with --kv-cache bottom-right, the only one a "
                  "cache takes)")
      ->check(CLI::IsMember({"top-left", "bottom-right"}));
  app->add_option("--window-left", f->window_left, "Keys visible left of the diagonal (default unbounded; a window as wide as the longest "
                 "sequence or wider is that sequence's length: the same mask)")
      ->check(integer_at_least<std::int64_t>(0, " (omit the flag for an unbounded window)"));
  app->add_option("--window-right", f->window_right, "Keys visible right of the diagonal (default unbounded; clamped like --window-left)")
      ->check(integer_at_least<std::int64_t>(0, " (omit the flag for an unbounded window)"));
  app->add_option("--bias", f->bias, "Additive bias")
      ->check(CLI::IsMember({"none", "dense", "broadcast-batch", "broadcast-heads", "row"}));
  app->add_option("--dropout", f->dropout, "Dropout probability p in [0, 1)")->check(number_in(0.0, 1.0, "in [0, 1)"));
  app->add_option("--seed", f->seed, "Dropout seed (0 to 2^64 - 1)")->check(integer_at_least<std::uint64_t>(0));
  app->add_option("--offset", f->offset, "Dropout offset (< 2^32)")
      ->check(integer_at_least<std::uint64_t>(0, " (it is one word of the Philox counter)", 0xffffffffull));
  app->add_option("--scale", f->scale, "Softmax scale (default 1/sqrt(D))")
      ->check(number_in(-std::numeric_limits<double>::max(), std::numeric_limits<double>::infinity(), "finite"));
  app->add_option("--varlen", f->varlen, "Variable lengths: query length of each sequence, e.g. 100,7,513")
      ->check(non_empty());
  app->add_option("--varlen-k", f->varlen_k, "Variable lengths: key length of each sequence (default: as --varlen)")
      ->check(non_empty());
  app->add_option("--kv-cache", f->kv_cache,
                  "Forward only: keys and values from a KV cache, contiguous ([B, Mk, Hk, D] per tensor) or paged "
                  "(pages of --page-size keys that a block table lists in a shuffled order); not with --varlen, "
                  "--bias or --dropout")
      ->check(CLI::IsMember({"contiguous", "paged"}));
  app->add_option("--page-size", f->page_size, "Keys per page of --kv-cache paged (default 16)")
      ->check(integer_at_least<std::int64_t>(1));
  app->add_option("--cache-len", f->cache_len,
                  "--kv-cache: keys each sequence's cache holds before the call (default: --seqlen-k less "
                  "--new-keys; given, --seqlen-k defaults to --cache-len plus --new-keys)")
      ->check(integer_at_least<std::int64_t>(0));
  app->add_option("--new-keys", f->new_keys,
                  "--kv-cache: keys appended to each sequence's cache after --cache-len (kv_cache.k_new, v_new), "
                  "then attended to with the cached ones; the queries are the last --seqlen-q positions (default 0)")
      ->check(integer_at_least<std::int64_t>(0));
  app->add_option("--backend", f->backend, "Backend")->check(CLI::IsMember({"auto", "cpu", "cuda", "reference"}));
  app->add_option("--precision", f->precision,
                  "fp32 on the CUDA backend: ieee (FMAs on CUDA cores) or tf32x3 (tensor cores, three TF32 products "
                  "per product); auto: tf32x3, but ieee for a forward whose LSE an FMA backward would take (bias, "
                  "dropout, D > 256)")
      ->check(CLI::IsMember({"auto", "ieee", "tf32x3"}));
  app->add_flag("--deterministic", f->deterministic, "Bit-reproducible backward (dQ added in a fixed order or without atomics)");
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
  app->add_option("--num-splits", f->num_splits,
                  "CUDA only: split each query tile's keys over N CTAs in the forward, the parts combined by their "
                  "LSE (0: the dispatcher's choice; 1: never)")
      ->check(integer_at_least<int>(0));
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
  const bool bottom_right = f.alignment == "bottom-right" || (f.alignment.empty() && !f.kv_cache.empty());
  s.mask.alignment = bottom_right ? Alignment::bottom_right : Alignment::top_left;
  tools::BiasKind kind;
  if (!tools::parse_bias_kind(f.bias, &kind)) return bad("--bias: unknown kind '" + f.bias + "'");
  s.bias = tools::bias_pattern(kind);
  s.dropout = Dropout{f.dropout, f.seed, f.offset};
  s.scale = f.scale;
  s.deterministic = f.deterministic;
  s.precision = f.precision == "ieee" ? Precision::ieee : f.precision == "tf32x3" ? Precision::tf32x3 : Precision::automatic;
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
  } else if (!f.varlen_k.empty() && f.kv_cache.empty()) {
    return bad("--varlen-k: needs --varlen (the query lengths)");
  }
  if (Status st = parse_cache(f, &s); !st.ok()) return st;
  *spec = s;
  return Status::Ok();
}

}  // namespace memattn::cli
