#include "cli/npy_io.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/numeric.hpp"

namespace memattn::cli {
namespace {

Status bad(const std::string& message) { return {StatusCode::invalid_argument, message}; }

bool exists(const std::string& path) { return std::ifstream(path).good(); }

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + ")";
}

Status expect_rank4(const tools::NpyArray& a, const std::string& name, const char* layout) {
  if (a.shape.size() != 4 || a.descr == "<i4")
    return bad("--load: " + name + " must be a rank-4 float array " + layout + ", got shape " + shape_text(a.shape) +
               " of " + a.descr);
  return Status::Ok();
}

std::vector<double> values_of(const tools::NpyArray& a) {
  std::vector<double> v(std::size_t(a.numel()));
  for (std::int64_t e = 0; e < a.numel(); ++e) v[std::size_t(e)] = a.get(e);
  return v;
}

// The array of a tensor in contiguous order (the bias's and dbias's broadcast dimensions taken
// once): float32, or float16 for f16 tensors.
tools::NpyArray array_of(const tools::Workload& w, tools::Tensor t) {
  const bool reduced = t == tools::Tensor::bias || t == tools::Tensor::dbias;
  const TensorRef& view = w.host(t).view;
  const std::vector<double> values = reduced ? w.to_double_reduced(t) : w.to_double(t);
  tools::NpyArray a;
  for (int d = 0; d < view.rank; ++d) a.shape.push_back(reduced && view.strides[d] == 0 ? 1 : view.sizes[d]);
  if (view.dtype == DType::f16) {
    a.descr = "<f2";
    a.data.resize(values.size() * 2);
    for (std::size_t e = 0; e < values.size(); ++e) {
      const std::uint16_t h = detail::float_to_half(float(values[e]));
      std::memcpy(a.data.data() + 2 * e, &h, 2);
    }
  } else {
    std::vector<float> f(values.begin(), values.end());
    a = tools::make_npy_f32(a.shape, f);
  }
  return a;
}

}  // namespace

Status load_inputs(const std::string& dir, tools::ProblemSpec* spec, LoadedInputs* in) {
  if (Status s = tools::read_npy(dir + "/q.npy", &in->q); !s.ok()) return s;
  if (Status s = tools::read_npy(dir + "/k.npy", &in->k); !s.ok()) return s;
  if (Status s = tools::read_npy(dir + "/v.npy", &in->v); !s.ok()) return s;
  if (Status s = expect_rank4(in->q, "q.npy", "[B, Mq, Hq, D]"); !s.ok()) return s;
  if (Status s = expect_rank4(in->k, "k.npy", "[B, Mk, Hk, D]"); !s.ok()) return s;
  if (Status s = expect_rank4(in->v, "v.npy", "[B, Mk, Hk, Dv]"); !s.ok()) return s;
  const auto& q = in->q.shape;
  const auto& k = in->k.shape;
  const auto& v = in->v.shape;
  if (k[0] != q[0] || k[3] != q[3])
    return bad("--load: k.npy shape " + shape_text(k) + " does not match q.npy " + shape_text(q) + " (B and D)");
  if (v[0] != k[0] || v[1] != k[1] || v[2] != k[2])
    return bad("--load: v.npy shape " + shape_text(v) + " does not match k.npy " + shape_text(k) + " (B, Mk, Hk)");
  if (spec->varlen()) {
    std::int64_t tq = 0, tk = 0;
    for (std::int32_t n : spec->varlen_q) tq += n;
    for (std::int32_t n : spec->varlen_k) tk += n;
    if (q[0] != 1 || q[1] != tq || k[1] != tk)
      return bad("--load: with --varlen, q.npy must be (1, " + std::to_string(tq) + ", Hq, D) and k.npy (1, " +
                 std::to_string(tk) + ", Hk, D); got " + shape_text(q) + " and " + shape_text(k));
  } else {
    spec->batch = q[0];
    spec->seqlen_q = q[1];
    spec->seqlen_k = k[1];
  }
  spec->heads_q = q[2];
  spec->heads_k = k[2];
  spec->head_dim = q[3];
  spec->head_dim_v = v[3];
  spec->kv_broadcast_batch = false;
  spec->padding = 0;

  in->has_bias = exists(dir + "/bias.npy");
  if (in->has_bias) {
    if (Status s = tools::read_npy(dir + "/bias.npy", &in->bias); !s.ok()) return s;
    if (Status s = expect_rank4(in->bias, "bias.npy", "[B, Hq, Mq, Mk]"); !s.ok()) return s;
    const std::int64_t full[4] = {spec->num_seqs(), spec->heads_q, spec->max_q(), spec->max_k()};
    tools::BiasPattern pattern{};
    for (int d = 0; d < 4; ++d) {
      const std::int64_t n = in->bias.shape[std::size_t(d)];
      if (n != full[d] && n != 1)
        return bad("--load: bias.npy shape " + shape_text(in->bias.shape) + " does not broadcast to [B, Hq, Mq, Mk] = " +
                   shape_text({full[0], full[1], full[2], full[3]}));
      pattern[std::size_t(d)] = n == 1 && full[d] != 1;
    }
    spec->bias = pattern;
    spec->bias_expanded = false;
  } else if (spec->bias) {
    return bad("--load: --bias was given but " + dir + "/bias.npy does not exist");
  }
  in->has_dout = exists(dir + "/do.npy");
  if (in->has_dout) {
    if (Status s = tools::read_npy(dir + "/do.npy", &in->dout); !s.ok()) return s;
    if (in->dout.shape != std::vector<std::int64_t>{q[0], q[1], q[2], v[3]})
      return bad("--load: do.npy must have the output's shape " + shape_text({q[0], q[1], q[2], v[3]}) + ", got " +
                 shape_text(in->dout.shape));
  }
  return Status::Ok();
}

void fill_inputs(const LoadedInputs& in, tools::Workload* w) {
  w->set_values(tools::Tensor::q, values_of(in.q));
  w->set_values(tools::Tensor::k, values_of(in.k));
  w->set_values(tools::Tensor::v, values_of(in.v));
  if (in.has_bias) w->set_values(tools::Tensor::bias, values_of(in.bias));
  if (in.has_dout) w->set_values(tools::Tensor::dout, values_of(in.dout));
}

Status save_results(const std::string& dir, const tools::Workload& w, Results results) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return bad("--save: cannot create " + dir + ": " + std::strerror(errno));
  // The inputs too, so that a saved folder can be given to --load.
  std::vector<std::pair<tools::Tensor, const char*>> files = {
      {tools::Tensor::q, "q.npy"}, {tools::Tensor::k, "k.npy"}, {tools::Tensor::v, "v.npy"}, {tools::Tensor::dout, "do.npy"}};
  if (w.has(tools::Tensor::bias)) files.push_back({tools::Tensor::bias, "bias.npy"});
  files.insert(files.end(), {{tools::Tensor::out, "out.npy"}, {tools::Tensor::lse, "lse.npy"}});
  if (results == Results::forward_and_backward) {
    files.insert(files.end(), {{tools::Tensor::dq, "dq.npy"}, {tools::Tensor::dk, "dk.npy"}, {tools::Tensor::dv, "dv.npy"}});
    if (w.has(tools::Tensor::dbias)) files.push_back({tools::Tensor::dbias, "dbias.npy"});
  }
  for (const auto& [tensor, name] : files)
    if (Status s = tools::write_npy(dir + "/" + name, array_of(w, tensor)); !s.ok()) return s;
  return Status::Ok();
}

}  // namespace memattn::cli
