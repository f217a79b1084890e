"""One SDPA backward (the backend named by argv[1]: flash | efficient | cudnn) at B H S D = argv[2:6]
for ncu, causal with a sixth argument `causal`. python3 bench/ab/s12_one_bwd.py flash 8 16 2048 128 [causal]"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

backend = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
           "cudnn": SDPBackend.CUDNN_ATTENTION}[sys.argv[1]]
b, h, s, d = (int(x) for x in sys.argv[2:6])
causal = sys.argv[6:7] == ["causal"]
q, k, v, dout = (torch.randn((b, h, s, d), device="cuda", dtype=torch.bfloat16) for _ in range(4))
q, k, v = (t.requires_grad_() for t in (q, k, v))
with sdpa_kernel([backend]):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
torch.autograd.grad(out, (q, k, v), dout)
torch.cuda.synchronize()
