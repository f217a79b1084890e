"""Session 17: where the ~0.3 ms that a synchronised backward costs through the PyTorch op over
the GPU's own time goes, at the suite's shapes. Per shape and layer, the median of bench.py's
timing (events around one call, then a synchronisation) and of the same calls issued back to
back (host time hidden): their difference is the host time a synchronised caller sees.
Layers: SDPA FLASH, memattn's eager path (autograd.grad), _C.backward on prebuilt descriptors
with torch's allocator for the workspace, and with the library's own workspace.
  PYTHONPATH=build-run/s17/python:bench python3 bench/ab/s17_host.py [B,H,S,D ...]
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import memattn
from bench import time_ms as sync_ms
from host_overhead import queued_ms
from memattn import _C, _ops


def layers(b, h, s, d):
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, dout = (torch.randn((b, h, s, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        ref = F.scaled_dot_product_attention(q, k, v)
    mem = memattn.scaled_dot_product_attention(q, k, v)
    # The binding on [B, M, H, D] copies (the layout memattn.attention takes).
    qb, kb, vb, dob = (t.detach().transpose(1, 2).contiguous() for t in (q, k, v, dout))
    scale = 1.0 / d ** 0.5
    fargs = (-1, -1, False, 0.0, None, scale, None, None, None)
    out, lse = _ops._forward(qb, kb, vb, None, *fargs)
    opts = _ops._options(qb, *fargs[:4], None, scale, None, None, None)
    bare = dict(opts, workspace=None)
    dq, dk, dv = torch.empty_like(qb), torch.empty_like(kb), torch.empty_like(vb)
    desc = _ops._desc
    bdesc = (desc(qb), desc(kb), desc(vb), None, desc(out), desc(lse), desc(dob), desc(dq), desc(dk), desc(dv), None,
             False)
    return [
        ("sdpa flash autograd.grad", lambda: torch.autograd.grad(ref, (q, k, v), dout, retain_graph=True)),
        ("memattn eager autograd.grad", lambda: torch.autograd.grad(mem, (q, k, v), dout, retain_graph=True)),
        ("memattn _C.backward (torch workspace)", lambda: _C.backward(*bdesc, opts)),
        ("memattn _C.backward (library workspace)", lambda: _C.backward(*bdesc, bare)),
    ]


def main():
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "autograd module:", _ops._autograd is not None)
    shapes = [tuple(int(x) for x in a.split(",")) for a in sys.argv[1:]] or [(2, 32, 8192, 64), (8, 32, 2048, 64)]
    for b, h, s, d in shapes:
        print(f"\nB={b} H={h} S={s} D={d}: backward ms (sync = bench.py's method; queued = back to back)")
        for rnd in range(2):
            for name, fn in layers(b, h, s, d):
                sync, queued = sync_ms(fn, 20), queued_ms(fn, 20)
                print(f"  round {rnd} {name:40s} sync {sync:7.3f} queued {queued:7.3f} host-exposed {sync - queued:6.3f}")


if __name__ == "__main__":
    main()
