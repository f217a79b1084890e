"""Session 22: the suite's D = 256 S = 512 backward, host against GPU. Per path (memattn's C++
eager path, SDPA's FLASH and EFFICIENT backends): bench.py's synchronised median against the
same calls issued back to back (host hidden), and memattn's host time per layer at D = 256.
  PYTHONPATH=build-py/python:bench python3 bench/ab/s22_host.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import host_overhead as ho
import memattn


def main():
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    ho.breakdown(b=1, h=1, s=128, d=256)
    for causal in (True, False):
        b, h, s, d = 32, 8, 512, 256
        gen = torch.Generator(device="cuda").manual_seed(1)
        q, k, v, dout = (torch.randn((b, h, s, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))

        def sdpa(backend):
            def f():
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return f

        print(f"\nB={b} H={h} S={s} D={d} causal={int(causal)}: backward ms (sync = bench.py, queued = back to back), host us")
        for name, fwd in (("memattn", lambda: memattn.scaled_dot_product_attention(q, k, v, is_causal=causal)),
                          ("flash", sdpa(SDPBackend.FLASH_ATTENTION)), ("efficient", sdpa(SDPBackend.EFFICIENT_ATTENTION)),
                          ("cudnn", sdpa(SDPBackend.CUDNN_ATTENTION))):
            out = fwd()
            bwd = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
            print(f"  {name:10s} sync {ho.sync_ms(bwd, 30):7.3f} queued {ho.queued_ms(bwd):7.3f} "
                  f"host {ho.host_us(bwd, 50):7.1f}")


if __name__ == "__main__":
    main()
