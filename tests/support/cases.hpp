// The problems every backend is checked on (DESIGN.md §3): awkward shapes (1, 17, 255, 1013,
// Mq != Mk both ways, D not a multiple of 8, D > 256), every mask, every bias broadcast,
// dropout, varlen with empty sequences and seqused_k, stride-0 K/V, non-contiguous strides,
// fully masked rows, and combinations.
#pragma once

#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

#include "workload/workload.hpp"

namespace memattn::testing {

struct NamedCase {
  std::string name;  // a valid GoogleTest parameter name
  tools::ProblemSpec spec;
};

// A problem of these sizes (bf16, no mask, bias or dropout, the automatic backend); tests set
// the rest.
tools::ProblemSpec problem_shape(std::int64_t batch, std::int64_t seqlen_q, std::int64_t seqlen_k, std::int64_t heads_q,
                                 std::int64_t heads_k, std::int64_t head_dim, std::int64_t head_dim_v);

// A packed variable-length batch (bf16, no mask: tests set the rest) whose sequences meet 128-row
// tiles every way: longer and shorter than a tile, without queries, without keys, seqused_k below
// a sequence's keys, rows outside the sequences; heads 4 / 2, D = Dv = head_dim.
tools::ProblemSpec packed_sequences(std::int64_t head_dim);

// The cases with the given dtype and backend. With the environment variable
// MEMATTN_TEST_KERNEL=<row>, the CUDA cases force that kernel-table row on its pass
// (Options::overrides.kernel of the forward for a fwd_ row, of the backward for a bwd_ row): a
// row the dispatcher would not choose runs every case (scripts/forced_row_tests.sh).
std::vector<NamedCase> feature_cases(DType dtype, Backend backend);

// The cases for each dtype, named "<dtype>_<case>": GoogleTest parameters.
std::vector<NamedCase> named_cases(Backend backend, std::initializer_list<DType> dtypes);
inline void PrintTo(const NamedCase& c, std::ostream* os) { *os << c.spec.describe(); }

}  // namespace memattn::testing
