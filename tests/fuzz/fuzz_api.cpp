// libFuzzer target over the C++ API (include/memattn/attention.hpp) on the CPU and reference
// backends: validate, *_workspace_size, describe_plan, forward_flops, forward and backward on
// arguments made from the fuzz bytes (problem_gen.hpp).
//
// What must hold for every input, beyond "no crash, no sanitizer report":
//   - validate, the workspace query, describe_plan and forward_flops agree (same code, same
//     message), and a refusal is invalid_argument or unsupported with a message;
//   - a refused forward/backward refuses as validate did and writes nothing (every byte of every
//     buffer compared), and no call writes an input;
//   - a successful call writes only the elements of its output views (the bytes between them
//     stay as they were), and no two output elements share an address (dbias's broadcast
//     dimensions excepted);
//   - with finite, moderate inputs and options: a query row that sees no key has out 0, LSE -inf
//     and dq 0, a key that no row sees has dk = dv = 0, every other output element is finite
//     (where its magnitude bound fits the dtype), and the CPU path's results are within a
//     tolerance of the float64 reference's.
// Only arguments whose every view is backed by memory of its full extent (and whose work is
// small) are run; the rest stop at validation.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "fuzz/buffers.hpp"
#include "fuzz/oracle.hpp"
#include "fuzz/problem_gen.hpp"
#include "memattn/attention.hpp"
#include "memattn/reference.hpp"

namespace memattn::fuzz {
namespace {

enum Slot { kQ, kK, kV, kBias, kOut, kLse, kDout, kDq, kDk, kDv, kDbias, kSlots };

// Input values: a splitmix64 stream seeded from the fuzz bytes.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t x = (s += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1p-53; }
};

struct Case {
  Buffer buf[kSlots];
  VarlenGen varlen;
  Options options;
  bool has_bias = false, has_lse = false, has_dbias = false;
  bool special_values = false;  // NaN, inf or huge values among the inputs
  double magnitude = 1.0;       // |input| <= magnitude otherwise
  std::unique_ptr<unsigned char[]> workspace;
  int workspace_calls = 0;  // allocate_workspace callback calls
  std::size_t workspace_asked = 0;
};

// Fills every element slot of an input's memory: values in [-m, m], or with specials sprinkled.
void fill_input(Buffer& b, Rng& rng, double m, bool special) {
  if (!valid_dtype(b.view.dtype)) {
    for (std::size_t i = 0; i < b.bytes; ++i) b.memory[i] = static_cast<unsigned char>(rng.next());
    return;
  }
  const std::size_t n = b.bytes / item_bytes(b.view.dtype);
  constexpr double kSpecials[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                  -std::numeric_limits<double>::infinity(), 1e30, -1e30, 65504.0, 1e5, -0.0, 1e-40};
  for (std::size_t e = 0; e < n; ++e) {
    double v = (2.0 * rng.uniform() - 1.0) * m;
    if (special && rng.next() % 16 == 0) v = kSpecials[rng.next() % (sizeof kSpecials / sizeof kSpecials[0])];
    detail::store_double(b.memory.get(), b.view.dtype, std::int64_t(e), v);
  }
}

void poison(Buffer& b) { std::fill(b.memory.get(), b.memory.get() + b.bytes, 0xff); }  // NaN in every dtype

void make_case(FuzzedDataProvider& f, Case* c) {
  const Dims d = make_dims(f);
  make_options(f, &c->options);
  if (f.ConsumeIntegralInRange<int>(0, 3) == 3) {
    make_varlen(f, &c->varlen);
    apply_varlen(c->varlen, &c->options);
  }
  const bool vl = c->varlen.enabled;
  // Packed tensors take batch 1 and the packed row counts (now and then hostile ones).
  const std::int64_t B = vl ? maybe_hostile(f, 1) : d.B;
  const std::int64_t Mq = vl ? maybe_hostile(f, c->varlen.total_q) : d.Mq;
  const std::int64_t Mk = vl ? maybe_hostile(f, c->varlen.total_k) : d.Mk;
  const DType dt = pick_dtype(f);
  make_tensor_arg(f, &c->buf[kQ], "q", false, dt, {B, Mq, d.Hq, d.D});
  make_tensor_arg(f, &c->buf[kK], "k", false, dtype_like(f, dt), {B, Mk, d.Hk, d.D});
  make_tensor_arg(f, &c->buf[kV], "v", false, dtype_like(f, dt), {B, Mk, d.Hk, d.Dv});
  make_tensor_arg(f, &c->buf[kOut], "out", true, dtype_like(f, dt), {B, Mq, d.Hq, d.Dv});
  c->has_lse = f.ConsumeIntegralInRange<int>(0, 7) != 7;
  if (c->has_lse) make_tensor_arg(f, &c->buf[kLse], "lse", true, dtype_like(f, DType::f32), {B, d.Hq, Mq});
  c->has_bias = f.ConsumeIntegralInRange<int>(0, 2) == 2;
  c->has_dbias = f.ConsumeBool();
  if (c->has_bias || f.ConsumeIntegralInRange<int>(0, 31) == 31) {  // sometimes a dbias without a bias
    // Each bias dimension is full or 1 (broadcast); with variable lengths the batch is num_seqs
    // and Mq/Mk the longest sequences (a few more allowed).
    std::int64_t full[4] = {d.B, d.Hq, Mq, Mk};
    if (vl) {
      std::int64_t mq = 0, mk = 0;
      const auto& st = c->varlen;
      for (std::size_t s = 0; s + 1 < st.seqstart_q.size(); ++s) {
        mq = std::max<std::int64_t>(mq, std::int64_t(st.seqstart_q[s + 1]) - st.seqstart_q[s]);
        const std::int64_t lk = st.has_used ? st.seqused_k[s] : std::int64_t(st.seqstart_k[s + 1]) - st.seqstart_k[s];
        mk = std::max<std::int64_t>(mk, lk);
      }
      full[0] = std::int64_t(st.seqstart_q.size()) - 1;
      full[2] = mq + (f.ConsumeIntegralInRange<int>(0, 7) == 7 ? 2 : 0);
      full[3] = mk + (f.ConsumeIntegralInRange<int>(0, 7) == 7 ? 1 : 0);
    }
    bool broadcast[4];
    for (int i = 0; i < 4; ++i) broadcast[i] = f.ConsumeIntegralInRange<int>(0, 2) == 2;
    const DType bdt = f.ConsumeBool() ? DType::f32 : dtype_like(f, dt);
    const auto sz = [&](int i) { return broadcast[i] ? 1 : full[i]; };
    make_tensor_arg(f, &c->buf[kBias], "bias", false, bdt, {sz(0), sz(1), sz(2), sz(3)});
    if (!c->has_bias) c->buf[kBias].view.data = nullptr, c->buf[kBias].view.rank = 0;
    if (c->has_dbias) {
      make_tensor_arg(f, &c->buf[kDbias], "dbias", true, dtype_like(f, bdt), {sz(0), sz(1), sz(2), sz(3)});
      // A full-size bias dimension with stride 0 broadcasts too; dbias may then be stride 0 there.
      for (int i = 0; i < 4; ++i)
        if (c->buf[kBias].view.strides[i] == 0 && f.ConsumeBool()) c->buf[kDbias].view.strides[i] = 0;
    }
  }
  make_tensor_arg(f, &c->buf[kDout], "dout", false, dtype_like(f, dt), {B, Mq, d.Hq, d.Dv});
  make_tensor_arg(f, &c->buf[kDq], "dq", true, dtype_like(f, dt), {B, Mq, d.Hq, d.D});
  make_tensor_arg(f, &c->buf[kDk], "dk", true, dtype_like(f, dt), {B, Mk, d.Hk, d.D});
  make_tensor_arg(f, &c->buf[kDv], "dv", true, dtype_like(f, dt), {B, Mk, d.Hk, d.Dv});

  // Workspace: none (the CPU needs none), a buffer of some size, a misaligned one, or the
  // allocator callback (which may fail).
  switch (f.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
    case 1: {
      const std::size_t bytes = f.ConsumeIntegralInRange<std::size_t>(0, 64);
      c->workspace.reset(new unsigned char[bytes + 16]);
      c->options.workspace = c->workspace.get() + (f.ConsumeIntegralInRange<int>(0, 3) == 3 ? 1 : 0);
      c->options.workspace_bytes = f.ConsumeBool() ? bytes : f.ConsumeIntegral<std::size_t>();
      break;
    }
    case 2: {
      const bool succeed = f.ConsumeBool();
      c->workspace.reset(new unsigned char[64]);
      c->options.allocate_workspace = [c, succeed](std::size_t bytes) -> void* {
        ++c->workspace_calls;
        c->workspace_asked = bytes;
        return succeed && bytes <= 64 ? c->workspace.get() : nullptr;
      };
      break;
    }
    default: break;
  }

  // An optional tensor with a null data pointer is absent (TensorRef::defined).
  c->has_bias = c->has_bias && c->buf[kBias].view.data;
  c->has_lse = c->has_lse && c->buf[kLse].view.data;
  c->has_dbias = c->has_dbias && c->buf[kDbias].view.data;

  Rng rng{f.ConsumeIntegral<std::uint64_t>()};
  c->special_values = f.ConsumeIntegralInRange<int>(0, 7) == 7;
  c->magnitude = f.PickValueInArray({1.0, 0.5, 2.0, 1.0 / 64});
  for (Slot s : {kQ, kK, kV, kBias, kDout})
    if (c->buf[s].memory) fill_input(c->buf[s], rng, c->magnitude, c->special_values);
  for (Slot s : {kOut, kLse, kDq, kDk, kDv, kDbias})
    if (c->buf[s].memory) poison(c->buf[s]);
}

ForwardArgs forward_args(const Case& c) {
  ForwardArgs a;
  static_cast<Options&>(a) = c.options;
  a.q = c.buf[kQ].view;
  a.k = c.buf[kK].view;
  a.v = c.buf[kV].view;
  if (c.has_bias) a.bias = c.buf[kBias].view;
  a.out = c.buf[kOut].view;
  if (c.has_lse) a.lse = c.buf[kLse].view;
  return a;
}

BackwardArgs backward_args(const Case& c) {
  BackwardArgs a;
  static_cast<Options&>(a) = c.options;
  a.q = c.buf[kQ].view;
  a.k = c.buf[kK].view;
  a.v = c.buf[kV].view;
  if (c.has_bias) a.bias = c.buf[kBias].view;
  a.out = c.buf[kOut].view;
  if (c.has_lse) a.lse = c.buf[kLse].view;
  a.dout = c.buf[kDout].view;
  a.dq = c.buf[kDq].view;
  a.dk = c.buf[kDk].view;
  a.dv = c.buf[kDv].view;
  if (c.has_dbias) a.dbias = c.buf[kDbias].view;
  return a;
}

void same_status(const Status& got, const Status& want, const char* call) {
  FUZZ_CHECK(got.code() == want.code() && got.message() == want.message(),
             std::string(call) + " says '" + got.to_string() + "' but validate says '" + want.to_string() + "'");
}

// validate and the queries that validate first: one verdict.
template <class Args>
Status validate_all(const Args& a, Status (*workspace_size)(const Args&, std::size_t*), std::size_t* bytes) {
  const Status v = validate(a);
  if (!v.ok()) {
    FUZZ_CHECK(v.code() == StatusCode::invalid_argument || v.code() == StatusCode::unsupported, v.to_string());
    FUZZ_CHECK(!v.message().empty(), "a refusal without a message");
  }
  *bytes = 0;
  same_status(workspace_size(a, bytes), v, "the workspace query");
  std::string plan;
  const Status p = describe_plan(a, &plan);
  same_status(p, v, "describe_plan");
  FUZZ_CHECK(!p.ok() || !plan.empty(), "describe_plan gave an empty plan");
  return v;
}

// Runs one pass when its arguments are backed and small; checks what it wrote. Returns true when
// the call ran and succeeded.
template <class Args>
bool run_pass(Case& c, const Args& a, const Status& verdict, std::size_t workspace_bytes, bool backward,
              bool runnable, const std::vector<Slot>& outputs) {
  if (!runnable) return false;
  for (Buffer& b : c.buf)
    if (b.memory) b.take_snapshot();
  c.workspace_calls = 0;
  Status s;
  if constexpr (std::is_same_v<Args, ForwardArgs>) s = forward(a);
  else s = memattn::backward(a);
  FUZZ_CHECK(c.workspace_calls == 0 || c.workspace_asked > 0, "allocate_workspace was asked for 0 bytes");
  const auto all_unchanged = [&](const std::string& why) {
    for (const Buffer& b : c.buf) FUZZ_CHECK(!b.memory || b.unchanged(), b.name + " was written by " + why);
  };
  if (!verdict.ok()) {
    same_status(s, verdict, backward ? "backward" : "forward");
    all_unchanged("a refused call: " + s.to_string());
    return false;
  }
  if (!s.ok()) {
    // Validation passed; what a CPU call may still refuse is the caller's workspace (alignment,
    // size) or a failed allocate_workspace.
    const bool workspace_refusal = s.message().find("workspace") != std::string::npos;
    FUZZ_CHECK(workspace_refusal, "validate accepted but the call failed: " + s.to_string());
    all_unchanged("a refused call: " + s.to_string());
    return false;
  }
  FUZZ_CHECK(c.options.workspace == nullptr || c.options.workspace_bytes >= workspace_bytes,
             "a workspace smaller than the query's size was accepted");
  for (int i = 0; i < kSlots; ++i) {
    const Buffer& b = c.buf[i];
    if (!b.memory) continue;
    const bool written = std::find(outputs.begin(), outputs.end(), Slot(i)) != outputs.end();
    if (!written) FUZZ_CHECK(b.unchanged(), b.name + " is not an output of this call but was written");
    else FUZZ_CHECK(b.unchanged_outside_view(), b.name + ": bytes outside its view were written");
  }
  for (Slot o : outputs)
    if (o != kDbias && c.buf[o].memory && c.buf[o].view.data)
      FUZZ_CHECK(distinct_addresses(c.buf[o].view, nullptr), c.buf[o].name + ": an accepted output has overlapping elements");
  if (backward && c.has_dbias) {
    bool shared[4];
    for (int d = 0; d < 4; ++d) shared[d] = c.buf[kBias].view.sizes[d] == 1 || c.buf[kBias].view.strides[d] == 0;
    FUZZ_CHECK(distinct_addresses(c.buf[kDbias].view, shared), "dbias: elements overlap outside the bias's broadcast dimensions");
  }
  return true;
}

std::string describe(const TensorRef& t) {
  std::string s = std::string(to_string(t.dtype)) + (t.data ? "" : " null") + " rank " + std::to_string(t.rank) + " sizes [";
  for (int d = 0; d < 4; ++d) s += (d ? "," : "") + std::to_string(t.sizes[d]);
  s += "] strides [";
  for (int d = 0; d < 4; ++d) s += (d ? "," : "") + std::to_string(t.strides[d]);
  return s + "]";
}

std::string describe(const Case& c) {
  const Options& o = c.options;
  std::string s = "arguments:";
  for (const Buffer& b : c.buf)
    if (b.memory) s += "\n  " + b.name + ": " + describe(b.view);
  s += "\n  has bias/lse/dbias " + std::to_string(c.has_bias) + std::to_string(c.has_lse) + std::to_string(c.has_dbias);
  s += "\n  mask " + std::to_string(o.mask.window_left) + " " + std::to_string(o.mask.window_right) + " alignment " +
       std::to_string(int(o.mask.alignment)) + "; dropout p " + std::to_string(o.dropout.p) + " seed " +
       std::to_string(o.dropout.seed) + " offset " + std::to_string(o.dropout.offset);
  s += "\n  scale " + (o.scale ? std::to_string(*o.scale) : std::string("default")) + "; backend " + to_string(o.backend) +
       "; precision " + std::to_string(int(o.precision)) +
       "; kernel '" + o.overrides.kernel + "'; magnitude " + std::to_string(c.magnitude) + (c.special_values ? " with specials" : "");
  const auto index = [](const char* name, const IndexRef& x, bool backed) {
    std::string t = std::string("\n  ") + name + (x.data ? "" : " null") + " size " + std::to_string(x.size) + " stride " +
                    std::to_string(x.stride) + ":";
    for (std::int64_t i = 0; backed && x.data && i < x.size && i < 16; ++i) t += " " + std::to_string(x.data[i * x.stride]);
    return t;
  };
  const Varlen& vl = o.varlen;
  if (vl.enabled())
    s += index("seqstart_q", vl.seqstart_q, c.varlen.q.backed) + index("seqstart_k", vl.seqstart_k, c.varlen.k.backed) +
         index("seqused_k", vl.seqused_k, c.varlen.used.backed);
  return s;
}

void run_case(Case& c) {
  fuzz_context() = describe(c);
  // MEMATTN_FUZZ_VERBOSE=1: each input's arguments before it runs (what a sanitizer report, which
  // ends the process, cannot show).
  static const bool verbose = std::getenv("MEMATTN_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "%s\n", fuzz_context().c_str());
  const ForwardArgs fa = forward_args(c);
  std::size_t fbytes = 0;
  const Status fv = validate_all<ForwardArgs>(fa, forward_workspace_size, &fbytes);
  double flops = -1;
  same_status(forward_flops(fa, &flops), fv, "forward_flops");
  FUZZ_CHECK(!fv.ok() || (std::isfinite(flops) && flops >= 0), "forward_flops = " + std::to_string(flops));

  Oracle oracle;
  const Oracle::Verdict meant = oracle.build(c.buf[kQ].view, c.buf[kK].view, c.buf[kV].view, c.varlen, c.options);
  FUZZ_CHECK(!fv.ok() || meant != Oracle::Verdict::must_refuse, "validate accepted arguments that break a rule");
  const bool shape_ok = meant == Oracle::Verdict::valid;
  const auto backed = [&](std::initializer_list<Slot> slots) {
    for (Slot s : slots)
      if (c.buf[s].memory && !c.buf[s].backed) return false;
    return !c.varlen.enabled || c.varlen.backed();
  };
  const bool small = shape_ok && oracle.work() <= kMaxWork;
  const bool fwd_ran = run_pass(c, fa, fv, fbytes, false, small && backed({kQ, kK, kV, kBias, kOut, kLse}),
                                {kOut, kLse});
  const bool moderate = !c.special_values && oracle.moderate_options();
  if (fwd_ran && moderate) oracle.check_forward(fa, c.has_lse, c.magnitude);

  const BackwardArgs ba = backward_args(c);
  std::size_t bbytes = 0;
  const Status bv = validate_all<BackwardArgs>(ba, backward_workspace_size, &bbytes);
  FUZZ_CHECK(!bv.ok() || meant != Oracle::Verdict::must_refuse, "validate accepted backward arguments that break a rule");
  const bool bwd_ran = run_pass(c, ba, bv, bbytes, true, small && backed({kQ, kK, kV, kBias, kOut, kLse, kDout, kDq, kDk, kDv, kDbias}),
                                {kDq, kDk, kDv, kDbias});
  // The backward's inputs out and LSE are consistent only when this input's forward wrote them.
  if (bwd_ran && fwd_ran && moderate)
    oracle.check_backward(ba, c.has_dbias, c.magnitude);
}

}  // namespace
}  // namespace memattn::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // One OpenMP thread unless the caller says otherwise: a fuzz run is many tiny calls, where
  // thread start-up dominates, and two fuzzers share the CI machine's two cores.
  setenv("OMP_NUM_THREADS", "1", 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider f(data, size);
  memattn::fuzz::Case c;
  memattn::fuzz::make_case(f, &c);
  memattn::fuzz::run_case(c);
  return 0;
}
