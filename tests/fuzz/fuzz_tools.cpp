// libFuzzer target over the tools' input parsers: the .npy reader (tools/workload/npy.*), and the
// CLI's command line (tools/cli: CommandLine, the flags, make_spec) through --load
// (tools/cli/npy_io.*) to the workload it builds and the library's validation of it.
//
// Three kinds of input, chosen by the first byte:
//   npy      the bytes are a .npy file: read it; when it reads, write it back and read that
//            again (the same array), and read every element;
//   flags    an argument list of known flags, values (hostile ones too) and random words: parse
//            it as `memattn` would; a parsed `run` or `kernels` is built into its workload
//            (capped at kHostLimit bytes, so that a valid but large problem is refused before
//            allocation) and its arguments validated by the library;
//   load     the same with --load of a folder holding q/k/v (bias, do) .npy files made from
//            the bytes: mostly well-formed headers of related shapes, sometimes not.
// What must hold beyond "no crash, no sanitizer report, no exception out of a parser": parse
// returns -1 (a command to run), 0 (help, version) or 2 (an error, with a message); every
// refusal carries a message; a .npy that reads round-trips exactly.
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command_line.hpp"
#include "cli/flags.hpp"
#include "cli/npy_io.hpp"
#include "cli/run.hpp"
#include "fuzz/buffers.hpp"
#include "workload/npy.hpp"
#include "workload/workload.hpp"

namespace memattn::fuzz {
namespace {

// The most host memory a fuzzed problem's tensors may take: larger valid problems stop at the
// CLI's memory check, as they would on a machine with this much memory.
constexpr std::int64_t kHostLimit = 256 << 10;

const char* const kLoadFiles[] = {"q.npy", "k.npy", "v.npy", "bias.npy", "do.npy"};

// The folder --load reads, made for one input and removed after it.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    char name[] = "/tmp/memattn-fuzz-XXXXXX";
    if (!::mkdtemp(name)) fail("cannot create a scratch folder in /tmp");
    path = name;
  }
  ~ScratchDir() {
    for (const char* file : kLoadFiles) std::remove((path + "/" + file).c_str());
    ::rmdir(path.c_str());
  }
};

void check_refusal(const Status& s, const std::string& what) {
  // MEMATTN_FUZZ_VERBOSE=1 shows each refusal: what a corpus reaches, when tuning the generator.
  static const bool verbose = std::getenv("MEMATTN_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "refused: %s: %s\n", what.c_str(), s.to_string().c_str());
  FUZZ_CHECK(s.code() == StatusCode::invalid_argument || s.code() == StatusCode::unsupported,
             what + ": " + s.to_string());
  FUZZ_CHECK(!s.message().empty(), what + ": a refusal without a message");
}

void fuzz_npy(const std::string& bytes) {
  std::istringstream in(bytes);
  tools::NpyArray a;
  const Status s = tools::read_npy(in, "fuzz.npy", &a);
  if (!s.ok()) return check_refusal(s, "read_npy");
  const std::int64_t n = a.numel();
  FUZZ_CHECK(n >= 0 && a.data.size() == std::size_t(n) * a.item_size(), "the data does not hold the shape's elements");
  double sum = 0;
  for (std::int64_t e = 0; e < n; ++e) sum += a.get(e);  // every element readable (ASan watches)
  (void)sum;
  std::ostringstream out;
  FUZZ_CHECK(tools::write_npy(out, "copy.npy", a).ok(), "write_npy failed on an array read_npy gave");
  std::istringstream again(out.str());
  tools::NpyArray b;
  const Status r = tools::read_npy(again, "copy.npy", &b);
  FUZZ_CHECK(r.ok(), "the written copy does not read: " + r.to_string());
  FUZZ_CHECK(a.descr == b.descr && a.shape == b.shape && a.data == b.data, "the round trip changed the array");
}

// Words for argument lists: the CLI's flags and values that sit on their rules' edges.
const char* const kFlags[] = {"--batch", "--seqlen-q", "--seqlen-k", "--heads-q", "--heads-k", "--head-dim", "--head-dim-v",
                              "--dtype", "--causal", "--alignment", "--window-left", "--window-right", "--bias", "--dropout",
                              "--seed", "--offset", "--scale", "--varlen", "--varlen-k", "--backend", "--precision", "--deterministic",
                              "--kernel", "--no-l2-groups", "--no-tail-split", "--pass", "--iters", "--verify", "--load",
                              "--save", "--json", "--resources", "--help", "--version", "-h", "--", "--batch=2",
                              "--kv-cache", "--page-size", "--cache-len", "--new-keys"};
const char* const kValues[] = {"0", "1", "2", "3", "7", "64", "65", "-1", "-0", "1.5", "0.5", "0.999999", "1e308", "-1e308",
                               "nan", "inf", "-inf", "1e-320", "0x10", "010", "", " ", "1,2", "3,0,5", "0,0", ",", "1,",
                               "2147483647", "2147483648", "1073741824", "1073741825", "4294967295", "4294967296",
                               "9223372036854775807", "9223372036854775808", "18446744073709551615",
                               "18446744073709551616", "99999999999999999999", "fp32", "fp16", "bf16", "fp64", "top-left",
                               "bottom-right", "none", "dense", "broadcast-batch", "broadcast-heads", "row", "cpu",
                               "reference", "auto", "cuda", "ieee", "tf32x3", "fwd", "bwd", "both", "fwd_sm80_a", "bwd_sm80_b,fwd_sm80_c",
                               "contiguous", "paged"};

std::vector<std::string> make_arguments(FuzzedDataProvider& f) {
  std::vector<std::string> args = {"memattn"};
  switch (f.ConsumeIntegralInRange<int>(0, 7)) {
    case 7: args.push_back("kernels"); break;
    case 6: args.push_back(f.ConsumeRandomLengthString(12)); break;
    default: args.push_back("run"); break;
  }
  // Usually a small problem first (later flags override it), so that the command passes the
  // memory check and reaches the workload and the library (the defaults are 8 heads x 1024 rows).
  if (f.ConsumeIntegralInRange<int>(0, 3) != 3)
    for (const char* a : {"--seqlen-q", "5", "--heads-q", "2", "--head-dim", "4", "--backend", "cpu"}) args.push_back(a);
  const int n = f.ConsumeIntegralInRange<int>(0, 6);
  for (int i = 0; i < n && f.remaining_bytes() > 0; ++i) {
    switch (f.ConsumeIntegralInRange<int>(0, 7)) {
      case 0: args.push_back(f.PickValueInArray(kFlags)); break;  // a flag alone (some take no value)
      case 1: args.push_back(f.ConsumeRandomLengthString(24)); break;
      case 2: args.push_back(f.PickValueInArray(kValues)); break;
      default:  // a flag and a value: the common shape of a command line
        args.push_back(f.PickValueInArray(kFlags));
        args.push_back(f.ConsumeIntegralInRange<int>(0, 7) == 7 ? f.ConsumeRandomLengthString(24) : f.PickValueInArray(kValues));
        break;
    }
  }
  return args;
}

// A .npy file of a given shape, usually well-formed; now and then its header, dtype, version or
// data length is wrong, or it is random bytes.
std::string make_npy(FuzzedDataProvider& f, std::vector<std::int64_t> shape) {
  if (f.ConsumeIntegralInRange<int>(0, 15) == 15) return f.ConsumeRandomLengthString(300);
  const char* descr = f.ConsumeIntegralInRange<int>(0, 7) == 7 ? f.PickValueInArray({"<f8", "<f2", "<i4", "|u1", ">f4", "<f4 "})
                                                              : "<f4";
  if (f.ConsumeIntegralInRange<int>(0, 15) == 15) {  // another rank or a hostile dimension
    shape.resize(std::size_t(f.ConsumeIntegralInRange<int>(0, 5)), 1);
    if (!shape.empty())
      shape[f.ConsumeIntegralInRange<std::size_t>(0, shape.size() - 1)] =
          f.PickValueInArray<std::int64_t>({0, 5, std::int64_t(1) << 31, std::int64_t(1) << 40, std::int64_t(1) << 62});
  }
  std::string text = "(";
  for (std::size_t d = 0; d < shape.size(); ++d) text += (d ? ", " : "") + std::to_string(shape[d]);
  text += shape.size() == 1 ? ",)" : ")";
  if (f.ConsumeIntegralInRange<int>(0, 31) == 31) text = f.PickValueInArray<std::string>({"(2x,)", "(,3)", "(-1,)", "(1 2)", "(", "(3L,)"});
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': " +
                       (f.ConsumeIntegralInRange<int>(0, 31) == 31 ? "True" : "False") + ", 'shape': " + text + ", }";
  const int version = f.ConsumeIntegralInRange<int>(0, 15) == 15 ? f.PickValueInArray({2, 3, 0, 9}) : 1;
  const std::size_t prefix = version == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string file = std::string("\x93NUMPY", 6) + char(version) + '\0';
  for (std::size_t b = 0; b + 8 < prefix; ++b) file.push_back(char((header.size() >> (8 * b)) & 0xff));
  file += header;
  std::int64_t items = 1;
  for (std::int64_t d : shape) items = d > 4096 ? 4097 : items * d > 4096 ? 4097 : items * d;
  const std::size_t item = std::string(descr) == "<f8" ? 8 : std::string(descr) == "<f2" ? 2 : 4;
  std::size_t bytes = std::size_t(items) * item;
  if (f.ConsumeIntegralInRange<int>(0, 15) == 15) bytes = bytes + f.ConsumeIntegralInRange<std::size_t>(0, 8) - 4;
  // The values: bytes of a splitmix64 stream (finite or not, as any bytes may be).
  std::uint64_t state = f.ConsumeIntegral<std::uint64_t>();
  for (std::size_t b = 0; b < std::min<std::size_t>(bytes, 1 << 14); ++b) {
    std::uint64_t x = (state += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    file.push_back(char((x ^ (x >> 27)) >> 56));
  }
  return file;
}

// q, k, v (and bias, do) files of related shapes in the scratch folder.
void write_load_folder(FuzzedDataProvider& f, const std::string& dir) {
  const auto dim = [&] { return f.ConsumeIntegralInRange<std::int64_t>(0, 4); };
  const std::int64_t B = dim(), Mq = dim(), Mk = dim(), Hk = dim(), Hq = Hk * f.ConsumeIntegralInRange<std::int64_t>(1, 2),
                     D = dim(), Dv = dim();
  const auto put = [&](const char* name, bool present, const std::vector<std::int64_t>& shape) {
    const std::string path = dir + "/" + name;
    if (!present) {
      std::remove(path.c_str());
      return;
    }
    std::ofstream(path, std::ios::binary) << make_npy(f, shape);
  };
  put("q.npy", f.ConsumeIntegralInRange<int>(0, 31) != 31, {B, Mq, Hq, D});
  put("k.npy", true, {B, Mk, Hk, D});
  put("v.npy", true, {B, Mk, Hk, Dv});
  put("bias.npy", f.ConsumeBool(),
      {f.ConsumeBool() ? 1 : B, f.ConsumeBool() ? 1 : Hq, f.ConsumeBool() ? 1 : Mq, f.ConsumeBool() ? 1 : Mk});
  put("do.npy", f.ConsumeBool(), {B, Mq, Hq, Dv});
}

// Builds what a parsed command would run, without running it (a workload capped at
// kHostLimit), and asks the library to validate it.
void build_command(cli::CommandLine& cl, const std::string& load) {
  cli::ProblemFlags& flags = cl.command() == cli::CommandLine::Command::run ? cl.run_options().problem : cl.kernels_flags();
  Backend backend = Backend::automatic;
  if (Status s = cli::parse_backend(flags.backend, &backend); !s.ok()) return check_refusal(s, "--backend");
  if (backend == Backend::automatic) backend = Backend::cpu;  // what auto resolves to without a GPU
  tools::ProblemSpec spec;
  std::unique_ptr<tools::Workload> w;
  if (cl.command() == cli::CommandLine::Command::run) {
    cli::RunOptions& o = cl.run_options();
    // Only the scratch folder is read (another path in the arguments is someone's file).
    o.load_dir = !load.empty() ? load : o.load_dir.empty() ? "" : "/nonexistent/memattn-fuzz";
    if (Status s = cli::prepare(o, backend, &spec, &w, kHostLimit); !s.ok()) return check_refusal(s, "prepare");
  } else {
    cli::apply_backend_defaults(&flags, backend);
    if (Status s = cli::make_spec(flags, &spec); !s.ok()) return check_refusal(s, "make_spec");
    spec.backend = backend;
    cli::clamp_windows(&spec);
    if (Status s = cli::check_host_memory(spec, false, kHostLimit); !s.ok()) return check_refusal(s, "check_host_memory");
    w = std::make_unique<tools::Workload>(spec);
  }
  FUZZ_CHECK(w != nullptr, "a prepared command without a workload");
  std::int64_t bytes = 0;
  FUZZ_CHECK(tools::workload_bytes(spec, &bytes) && bytes == std::int64_t(w->host_bytes()),
             "workload_bytes (the memory check's count) differs from the bytes the workload holds");
  FUZZ_CHECK(!spec.describe().empty(), "an empty problem description");
  for (const Status& s : {validate(w->forward_args()), validate(w->backward_args())})
    if (!s.ok()) check_refusal(s, "the library's validation of the CLI's problem");
}

void fuzz_command_line(FuzzedDataProvider& f, bool load) {
  const std::vector<std::string> args = make_arguments(f);
  std::unique_ptr<ScratchDir> dir;
  if (load) {
    dir = std::make_unique<ScratchDir>();
    write_load_folder(f, dir->path);
  }
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  cli::CommandLine cl;
  int code = 0;
  try {
    code = cl.parse(int(argv.size()), argv.data(), out, err);
  } catch (const std::exception& e) {
    fail(std::string("an exception left CommandLine::parse: ") + e.what());
  }
  FUZZ_CHECK(code == -1 || code == 0 || code == 2, "parse returned " + std::to_string(code));
  if (code == 2) FUZZ_CHECK(!err.str().empty(), "a refused command line without a message");
  if (code != -1) return;
  try {
    build_command(cl, dir ? dir->path : std::string());
  } catch (const std::exception& e) {
    fail(std::string("an exception left the CLI's problem builder: ") + e.what());
  }
}

}  // namespace
}  // namespace memattn::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("OMP_NUM_THREADS", "1", 0);  // as in fuzz_api.cpp: many tiny calls
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider f(data, size);
  switch (f.ConsumeIntegralInRange<int>(0, 2)) {
    case 0:
      // A .npy file made from a header recipe (as in --load), or the raw bytes.
      if (f.ConsumeBool()) {
        std::vector<std::int64_t> shape(f.ConsumeIntegralInRange<std::size_t>(0, 4));
        for (std::int64_t& d : shape) d = f.ConsumeIntegralInRange<std::int64_t>(0, 5);
        memattn::fuzz::fuzz_npy(memattn::fuzz::make_npy(f, shape));
      } else {
        memattn::fuzz::fuzz_npy(f.ConsumeRemainingBytesAsString());
      }
      break;
    case 1: memattn::fuzz::fuzz_command_line(f, false); break;
    default: memattn::fuzz::fuzz_command_line(f, true); break;
  }
  return 0;
}
