#include "cli/kernels.hpp"

#include <iostream>

#include "memattn/kernels.hpp"

namespace memattn::cli {

int kernels_command(ProblemFlags& flags, bool resources) {
  Backend backend = Backend::automatic;
  if (Status s = parse_backend(flags.backend, &backend); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 2;
  }
  if (backend == Backend::automatic) backend = cuda_available() ? Backend::cuda : Backend::cpu;
  apply_backend_defaults(&flags, backend);
  tools::ProblemSpec spec;
  if (Status s = make_spec(flags, &spec); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 2;
  }
  spec.backend = backend;
  clamp_windows(&spec);
  if (Status s = check_host_memory(spec, false); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 2;
  }

  std::cout << "CPU implementations:\n"
            << "  reference  float64, one query row at a time, every feature (for checking)\n"
            << "  cpu-fast   tiles of 64 queries x 64 keys (16 x 64 when D + Dv > 1024), online softmax,\n"
            << "             fp32 accumulation, OpenMP over tiles, every feature\n";
  const std::vector<KernelInfo> table = list_kernels(resources);
  std::cout << "CUDA kernel table (" << table.size() << " rows, tried in this order):\n";
  for (const KernelInfo& k : table) {
    std::cout << "  " << k.description << "\n";
    if (!k.resources.empty()) std::cout << "      " << k.resources << "\n";
  }

  tools::Workload w(spec);
  if (backend == Backend::cuda)
    if (Status s = w.to_device(); !s.ok()) {
      std::cerr << "error: backend cuda: " << s.message() << "\n";
      return 2;
    }
  std::cout << "problem: " << spec.describe() << " on " << to_string(backend) << "\n";
  std::string plan;
  const Status f = describe_plan(w.forward_args(), &plan);
  std::cout << "  forward  -> " << (f.ok() ? plan : f.to_string()) << "\n";
  // The backward takes no KV cache (nor has a cache's workload the backward's tensors to ask about).
  Status b = Status::Ok();
  if (spec.cache.enabled()) plan = "none: the backward takes no KV cache (memattn run --kv-cache runs the forward only)";
  else b = describe_plan(w.backward_args(), &plan);
  std::cout << "  backward -> " << (b.ok() ? plan : b.to_string()) << "\n";
  // A pass without a kernel is information; only a problem the library rejects is an error.
  const auto bad = [](const Status& s) { return !s.ok() && s.code() != StatusCode::unsupported; };
  return bad(f) || bad(b) ? 2 : 0;
}

}  // namespace memattn::cli
