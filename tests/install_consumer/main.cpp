// Runs one small attention through the installed library and checks it against the reference.
#include <memattn/memattn.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  const int M = 5, H = 2, D = 8;
  std::vector<float> q(M * H * D), k(q.size()), v(q.size()), out(q.size(), NAN), lse(H * M, NAN);
  for (std::size_t e = 0; e < q.size(); ++e) {
    q[e] = std::sin(float(e));
    k[e] = std::cos(float(e));
    v[e] = std::sin(0.5f * float(e));
  }
  memattn::ForwardArgs args;
  args.q = memattn::make_tensor(q.data(), memattn::DType::f32, {1, M, H, D});
  args.k = memattn::make_tensor(k.data(), memattn::DType::f32, {1, M, H, D});
  args.v = memattn::make_tensor(v.data(), memattn::DType::f32, {1, M, H, D});
  args.out = memattn::make_tensor(out.data(), memattn::DType::f32, {1, M, H, D});
  args.lse = memattn::make_tensor(lse.data(), memattn::DType::f32, {1, H, M});
  args.mask = memattn::Mask::causal();
  if (memattn::Status s = memattn::forward(args); !s.ok()) {
    std::printf("forward failed: %s\n", s.to_string().c_str());
    return 1;
  }
  memattn::reference::ForwardResult ref;
  if (!memattn::reference::forward(args, &ref).ok()) return 1;
  for (std::size_t e = 0; e < out.size(); ++e)
    if (!(std::abs(out[e] - ref.out[e]) < 1e-5)) return 1;
  std::printf("memattn %s from find_package: ok\n", memattn::version());
  return 0;
}
