// `memattn run`: build a problem (flags, or --load), run forward and/or backward on a backend,
// time it, verify it against the float64 reference, save results.
#include "cli/run.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/npy_io.hpp"
#include "workload/verify.hpp"

namespace memattn::cli {
namespace {

// The reference's work above which --verify checks a sample (first/last sequence and kv head).
constexpr double kFullVerifyBudget = 4e9;
constexpr std::uint64_t kInputSeed = 20261121;

struct PassResult {
  bool ran = false;
  double median_ms = 0, min_ms = 0, tflops = 0;
  std::string plan;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double peak_host_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) * 1024.0;
}

// Progress of the reference on stderr, for runs long enough to need it.
reference::Progress progress_printer(const char* what) {
  auto start = std::chrono::steady_clock::now();
  auto last = std::make_shared<int>(-1);
  return [=](long long done, long long total) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int percent = int(100 * done / std::max(total, 1ll));
    if (seconds > 2.0 && percent / 10 != *last / 10) {
      *last = percent;
      std::cout.flush();
      std::fprintf(stderr, "  %s: %d%% (%.0f s)\n", what, percent, seconds);
    }
  };
}

// Runs `call` once on the default stream (the checked run) and then `iters` timed runs: each a
// whole call (host work included), or with `graph` a replay of the call captured once in a CUDA
// graph, after an L2 flush (the device's work alone, as a serving loop's graph would run it).
Status time_pass(bool device, bool graph, int iters, const std::function<Status(void* stream)>& call,
                 PassResult* r) {
  double ms = 0;
  if (Status s = tools::time_call(device, [&] { return call(nullptr); }, &ms); !s.ok()) return s;
  std::vector<double> times;
  if (graph && iters > 0) {
    if (Status s = tools::time_graph(call, iters, &times); !s.ok()) return s;
  } else {
    for (int it = 0; it < iters; ++it) {
      if (Status s = tools::time_call(device, [&] { return call(nullptr); }, &ms); !s.ok()) return s;
      times.push_back(ms);
    }
  }
  if (times.empty()) times.push_back(ms);
  r->ran = true;
  r->median_ms = median(times);
  r->min_ms = *std::min_element(times.begin(), times.end());
  return Status::Ok();
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// Where the human-readable report goes: stdout, or stderr when --json owns stdout.
std::ostream& text(const RunOptions& o) { return o.json ? std::cerr : std::cout; }

// The run's flags that a KV cache changes: the pass (the backward takes no cache) and the .npy
// folders, whose q, k, v files are a plain problem's.
Status settle_cache_flags(bool cache, RunOptions* o) {
  const auto bad = [](const std::string& m) { return Status{StatusCode::invalid_argument, m}; };
  if (!cache) {
    if (o->pass.empty()) o->pass = "both";
    return Status::Ok();
  }
  if (o->pass.empty()) o->pass = "fwd";
  if (o->pass != "fwd")
    return bad("--pass: " + o->pass + " runs the backward, which takes no KV cache; leave --pass out with --kv-cache "
               "(or give --pass fwd)");
  if (!o->load_dir.empty()) return bad("--load: not with --kv-cache (the folder's q, k, v are a problem without a cache)");
  if (!o->save_dir.empty()) return bad("--save: not with --kv-cache (a saved folder is read back as a problem without a cache)");
  return Status::Ok();
}

void print_check(std::ostream& out, const tools::CheckLine& c) {
  char line[256];
  if (c.exact)
    std::snprintf(line, sizeof line, "  %-7s the cache before the call with the new keys at their slots, bit for bit: "
                  "%lld of %lld elements differ  %s\n", c.name.c_str(), static_cast<long long>(c.error.bad),
                  static_cast<long long>(c.error.compared), c.pass() ? "PASS" : "FAIL");
  else
    std::snprintf(line, sizeof line, "  %-6s max abs %.3e  rel %.3e  (tolerance %.0e)%s  %s\n", c.name.c_str(),
                  c.error.max_abs, c.error.rel_l2, c.tolerance,
                  c.error.bad ? (" " + std::to_string(c.error.bad) + " unwritten/NaN").c_str() : "",
                  c.pass() ? "PASS" : "FAIL");
  out << line;
}

}  // namespace

void add_run_flags(CLI::App* app, RunOptions* o) {
  add_problem_flags(app, &o->problem);
  app->add_option("--pass", o->pass, "Which pass to run (default both; fwd with --kv-cache, which has no backward)")
      ->check(CLI::IsMember({"fwd", "bwd", "both"}));
  app->add_option("--iters", o->iters, "Timed iterations (after one checked run)")->check(count_at_least_zero());
  app->add_flag("--verify", o->verify, "Check the results against the float64 reference");
  app->add_flag("--graph", o->graph,
                "Time the device's work alone: each timed call replayed from a CUDA graph after an L2 flush (cuda "
                "backend; a KV cache call is given max_seqlen_k, so nothing is read on the host)");
  app->add_option("--load", o->load_dir, "Read q.npy k.npy v.npy (bias.npy do.npy) from DIR")->check(non_empty_value());
  app->add_option("--save", o->save_dir, "Write out.npy lse.npy (dq.npy dk.npy dv.npy dbias.npy) to DIR")
      ->check(non_empty_value());
  app->add_flag("--json", o->json, "Print one machine-readable result line on stdout");
}

Status prepare(RunOptions& o, Backend backend, tools::ProblemSpec* spec, std::unique_ptr<tools::Workload>* w,
               std::int64_t host_limit) {
  apply_backend_defaults(&o.problem, backend);
  if (Status s = make_spec(o.problem, spec); !s.ok()) return s;
  if (Status s = settle_cache_flags(spec->cache.enabled(), &o); !s.ok()) return s;
  LoadedInputs loaded;
  if (!o.load_dir.empty())
    if (Status s = load_inputs(o.load_dir, spec, &loaded); !s.ok()) return s;
  spec->backend = backend;
  clamp_windows(spec);  // against the final lengths (those of the files with --load)
  if (Status s = check_host_memory(*spec, !o.load_dir.empty(), host_limit); !s.ok()) return s;
  *w = std::make_unique<tools::Workload>(*spec);
  if (!o.load_dir.empty()) fill_inputs(loaded, w->get());
  else (*w)->fill_inputs(kInputSeed);
  if (backend == Backend::cuda)
    if (Status s = (*w)->to_device(); !s.ok()) return {s.code(), "backend cuda: " + s.message()};
  (*w)->poison_outputs();
  return Status::Ok();
}

int run_command(RunOptions& o) {
  Backend requested = Backend::automatic;
  if (Status s = parse_backend(o.problem.backend, &requested); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 2;
  }
  std::ostream& out = text(o);
  out << "memattn " << version() << " run\n";
  // auto: the GPU when there is one and the CUDA backend can run the problem, else the CPU.
  Backend backend = requested == Backend::automatic ? (cuda_available() ? Backend::cuda : Backend::cpu) : requested;
  tools::ProblemSpec spec;
  std::unique_ptr<tools::Workload> workload;
  if (Status s = prepare(o, backend, &spec, &workload); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 2;
  }
  std::string plan;
  const bool do_bwd_requested = o.pass != "fwd";
  if (requested == Backend::automatic && backend == Backend::cuda) {
    // Both passes must have a CUDA kernel (the backward needs the forward's output too).
    Status s = describe_plan(workload->forward_args(), &plan);
    if (s.ok() && do_bwd_requested) s = describe_plan(workload->backward_args(), &plan);
    if (s.code() == StatusCode::unsupported) {
      out << "note: the GPU cannot run this problem (" << s.message() << "); running on the CPU\n";
      backend = Backend::cpu;
      if (Status p = prepare(o, backend, &spec, &workload); !p.ok()) {
        std::cerr << "error: " << p.message() << "\n";
        return 2;
      }
    }
  }
  tools::Workload& w = *workload;
  const bool device = backend == Backend::cuda;
  const bool do_fwd = o.pass != "bwd", do_bwd = o.pass != "fwd";
  out << "problem: " << spec.describe() << "\n";

  const auto fail = [&](const Status& s) {
    std::cerr << "error: " << s.to_string() << "\n";
    return 2;
  };
  double fwd_flops = 0;
  if (Status s = forward_flops(w.forward_args(), &fwd_flops); !s.ok()) return fail(s);
  if (device)
    if (Status s = w.reserve_workspace(); !s.ok()) return fail(s);

  if (o.graph && !device) return fail({StatusCode::invalid_argument, "--graph: times CUDA graphs; run with --backend cuda"});
  PassResult fwd, bwd;
  ForwardArgs fargs = w.forward_args();
  // A graph cannot capture the host's read of a cache's lengths and pages; the bound skips it.
  if (o.graph && spec.cache.enabled()) fargs.kv_cache.max_seqlen_k = spec.seqlen_k;
  if (Status s = describe_plan(fargs, &fwd.plan); !s.ok()) return fail(s);
  out << "backend: " << to_string(backend) << "\n  forward:  " << fwd.plan << "\n";
  const reference::Selection sel = o.verify ? tools::sample_selection(w, kFullVerifyBudget) : reference::Selection{};
  // The forward appends to a cache: the reference and the cache's snapshot are taken before it.
  const bool cache = spec.cache.enabled();
  reference::ForwardResult cache_ref;
  tools::CacheSnapshot cache_before;
  if (o.verify && cache) {
    if (Status s = tools::forward_reference(w, sel, progress_printer("reference forward"), &cache_ref); !s.ok())
      return fail(s);
    cache_before = tools::snapshot_cache(w);
  }
  // The forward runs even for --pass bwd: the backward needs its output and LSE. With a cache,
  // every call appends the same new keys to the same slots (seqlens stays), so each timed call is
  // the same call as the checked one.
  const auto run_forward = [&](void* stream) {
    ForwardArgs a = fargs;
    a.stream = stream;
    return forward(a);
  };
  if (Status s = time_pass(device, o.graph, do_fwd ? o.iters : 0, run_forward, &fwd); !s.ok()) return fail(s);
  fwd.ran = do_fwd;
  fwd.tflops = fwd.median_ms > 0 ? fwd_flops / (fwd.median_ms * 1e-3) / 1e12 : 0;
  if (do_bwd) {
    const BackwardArgs bargs = w.backward_args();
    if (Status s = describe_plan(bargs, &bwd.plan); !s.ok()) return fail(s);
    out << "  backward: " << bwd.plan << "\n";
    const auto run_backward = [&](void* stream) {
      BackwardArgs a = bargs;
      a.stream = stream;
      return backward(a);
    };
    if (Status s = time_pass(device, o.graph, o.iters, run_backward, &bwd); !s.ok()) return fail(s);
    bwd.tflops = bwd.median_ms > 0 ? 2.5 * fwd_flops / (bwd.median_ms * 1e-3) / 1e12 : 0;
  }
  if (Status s = w.copy_outputs_to_host(); !s.ok()) return fail(s);

  char line[256];
  if (fwd.ran) {
    std::snprintf(line, sizeof line, "forward:  %10.3f ms (median of %d, min %.3f)  %8.3f TFLOP/s\n", fwd.median_ms,
                  std::max(o.iters, 1), fwd.min_ms, fwd.tflops);
    out << line;
  }
  if (bwd.ran) {
    std::snprintf(line, sizeof line, "backward: %10.3f ms (median of %d, min %.3f)  %8.3f TFLOP/s\n", bwd.median_ms,
                  std::max(o.iters, 1), bwd.min_ms, bwd.tflops);
    out << line;
  }
  const double host_peak = peak_host_bytes();
  out << "memory: tensors " << tools::format_bytes(double(w.host_bytes())) << (device ? " on the device" : "")
      << ", peak host RSS " << tools::format_bytes(host_peak);
  if (device) out << ", device memory in use " << tools::format_bytes(tools::device_memory_in_use());
  out << "\n";

  std::string verdict = "skipped";
  std::vector<tools::CheckLine> checks;
  if (o.verify) {
    tools::VerifyReport fr, br;
    if (cache) {
      tools::check_forward(w, sel, cache_ref, &fr);
      tools::check_cache_append(w, cache_before, &fr);
    } else if (do_fwd) {
      if (Status s = tools::verify_forward(w, sel, progress_printer("reference forward"), &fr); !s.ok()) return fail(s);
    }
    if (do_bwd) {
      if (Status s = tools::verify_backward(w, sel, progress_printer("reference backward"), &br); !s.ok()) return fail(s);
    }
    const std::string scope = do_fwd ? fr.scope : br.scope;
    out << "verify against the float64 reference (" << scope << "):\n";
    for (const tools::VerifyReport* r : {&fr, &br})
      for (const tools::CheckLine& c : r->lines) {
        print_check(out, c);
        checks.push_back(c);
      }
    verdict = fr.pass() && br.pass() ? "pass" : "fail";
    out << "result: " << (verdict == "pass" ? "PASS" : "FAIL") << "\n";
  }
  if (!o.save_dir.empty()) {
    const Results results = do_bwd ? Results::forward_and_backward : Results::forward;
    if (Status s = save_results(o.save_dir, w, results); !s.ok()) return fail(s);
    out << "saved results to " << o.save_dir << "\n";
  }
  if (o.json) {
    std::ostringstream j;
    j << "{\"problem\":\"" << json_escape(spec.describe()) << "\",\"backend\":\"" << to_string(backend) << "\"";
    j << ",\"kv_cache\":\"" << tools::to_string(spec.cache.layout) << "\"";
    if (cache) {
      if (spec.cache.layout == tools::CacheLayout::paged) j << ",\"page_size\":" << spec.cache.page_size;
      j << ",\"cache_len\":" << spec.cache.cache_len << ",\"new_keys\":" << spec.cache.new_keys;
    }
    if (fwd.ran)
      j << ",\"fwd_plan\":\"" << json_escape(fwd.plan) << "\",\"fwd_ms\":" << fwd.median_ms << ",\"fwd_tflops\":" << fwd.tflops;
    if (bwd.ran)
      j << ",\"bwd_plan\":\"" << json_escape(bwd.plan) << "\",\"bwd_ms\":" << bwd.median_ms << ",\"bwd_tflops\":" << bwd.tflops;
    j << ",\"graph\":" << (o.graph ? "true" : "false");
    j << ",\"fwd_flops\":" << fwd_flops << ",\"tensor_bytes\":" << w.host_bytes() << ",\"peak_host_bytes\":" << host_peak;
    j << ",\"verify\":\"" << verdict << "\"";
    if (!checks.empty()) {
      j << ",\"errors\":{";
      for (std::size_t c = 0; c < checks.size(); ++c)
        j << (c ? "," : "") << "\"" << checks[c].name << "\":{\"rel\":" << checks[c].error.rel_l2
          << ",\"max_abs\":" << checks[c].error.max_abs << ",\"bad\":" << checks[c].error.bad << "}";
      j << "}";
    }
    j << "}";
    std::cout << j.str() << std::endl;
  }
  return verdict == "fail" ? 1 : 0;
}

}  // namespace memattn::cli
