// Host memory the CPU backends may still use, and their largest allocations, so that a problem
// too large for the machine is refused with the numbers instead of meeting the OOM killer (Linux
// overcommits: a huge allocation succeeds and the process dies when it touches the pages).
#include <omp.h>

#include <cstdio>

#include "core/memory.hpp"
#include "core/problem.hpp"

namespace memattn::detail {

// C stdio rather than iostreams: the library has none, and a std::ifstream here crashed the Python
// package's CPU calls on a machine whose torch loads its libraries globally (torch 2.11, H100 host).
std::optional<double> host_memory_available() {
  std::FILE* meminfo = std::fopen("/proc/meminfo", "r");
  if (meminfo == nullptr) return std::nullopt;  // not Linux: no refusal ahead of time
  double available = -1, swap = 0;
  char line[256];
  while (std::fgets(line, sizeof line, meminfo) != nullptr) {
    unsigned long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) available = double(kib) * 1024;
    if (std::sscanf(line, "SwapFree: %llu kB", &kib) == 1) swap = double(kib) * 1024;
  }
  std::fclose(meminfo);
  if (available < 0) return std::nullopt;
  return available + swap;
}

double host_scratch_bytes(const Problem& p, bool backward) {
  const double rows = double(p.batch) * double(p.heads_q) * double(p.seqlen_q);
  if (p.backend == Backend::reference) {
    // Results in float64, written to the outputs once complete.
    if (!backward) return 8.0 * rows * double(p.head_dim_v + 1);
    const double keys = double(p.batch) * double(p.heads_k) * double(p.seqlen_k);
    const double dbias = p.has_dbias ? 8.0 * rows * double(p.seqlen_k) : 0.0;
    return 8.0 * (rows * double(p.head_dim) + keys * double(p.head_dim + p.head_dim_v)) + dbias;
  }
  if (!backward) return 0.0;  // the forward's scratch is a few tiles per thread
  // Per-row LSE and delta, and with fewer (sequence, kv head) pairs than threads, one partial dQ
  // per key chunk (cpu/backward.cpp, main_pass).
  const double threads = double(omp_get_max_threads());
  const bool chunked = double(p.batch) * double(p.heads_k) < threads;
  return 8.0 * rows + (chunked ? 4.0 * threads * rows * double(p.head_dim) : 0.0);
}

}  // namespace memattn::detail
