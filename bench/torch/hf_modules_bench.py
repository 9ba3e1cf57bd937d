#!/usr/bin/env python3
"""Hugging Face transformers' eager modules against their fused counterparts, and PyTorch SDPA by
backend, on one GPU: the measurements behind training.framework hf-transformers.

  python3 bench/torch/hf_modules_bench.py --out DIR --device-kind h100-sxm [--quick]

Writes two CSVs (the columns of bench/data/h100-hf-modules.csv and h100-sdpa-attention.csv):

  <kind>-hf-modules.csv  module, shape, fwd_s, bwd_s, elements
      LlamaRMSNorm vs F.rms_norm and F.layer_norm; NewGELUActivation (gelu_new) vs F.gelu(tanh);
      SwiGLU as transformers runs it (act(gate) * up on two separate tensors) and as the shared
      data's silu_mul (halves of one tensor); apply_rotary_pos_emb(q, k); dropout (p 0.1); and
      cross-entropy on logits.float() at vocabularies 32,000..256,000; and LlamaRMSNorm and
      gelu_new on 16 tokens (the host's per-operator dispatch cost).
  <kind>-sdpa-attention.csv  backend, batch, heads, kv_heads, seq, head_dim, fwd_s, bwd_s, fwd_tflops, bwd_tflops
      F.scaled_dot_product_attention, causal, bf16, head sizes 64/80/128/256, seq 1k..8k at 16k
      tokens, MHA and GQA (32 heads over 8), PyTorch's default pick and each backend forced.

Timing: CUDA events around 20 calls after 5 warm-up calls, mean per call. Forward under no_grad;
backward = (forward + backward) - forward. Inputs are leaf tensors whose .grad is cleared before
each call (no gradient accumulation is timed).

Fitting into the tables offsim reads (the rows named as in fit_hf_modules.py's MODULES):
  python3 bench/torch/fit_hf_modules.py DIR/<kind>-hf-modules.csv bench/data/<kind>-membound.csv \\
      configs/frameworks/hf-transformers.yaml --launch-us <the table's kernel_launch in us> \\
      --out configs/calibration/hf-transformers.kernels.yaml
  python3 bench/torch/sdpa_table.py DIR/<kind>-sdpa-attention.csv --out configs/calibration/<kind>.sdpa.yaml
then copy the CSVs into bench/data/ with their source note and run the unit tests
(tests/unit/hf_modules_test.cpp checks every module row against the model).
"""
import argparse
import csv
import os

import torch
import torch.nn.functional as F

from bench_io import timed

DEV = "cuda"
BF16 = torch.bfloat16




def forward_backward(inputs, fn):
    """Forward (no grad) and backward seconds of fn(*inputs) with inputs as leaf tensors."""
    def fwd():
        with torch.no_grad():
            fn(*inputs)
    tf = timed(fwd)
    out = fn(*inputs)
    grad = torch.randn_like(out)

    def both():
        for x in inputs:
            x.grad = None
        fn(*inputs).backward(grad)
    return tf, timed(both) - tf


def leaf(*shape):
    return torch.randn(*shape, device=DEV, dtype=BF16, requires_grad=True)


def hf_modules(quick):
    from transformers.activations import NewGELUActivation
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb
    rows = []

    def add(name, shape, inputs, fn):
        tf, tb = forward_backward(inputs, fn)
        rows.append(dict(module=name, shape=shape, fwd_s=tf, bwd_s=tb, elements=inputs[0].numel()))
        print(name, shape, f"{tf * 1e6:.1f} us {tb * 1e6:.1f} us", flush=True)

    # Host dispatch: the same modules on 16 tokens, where every kernel is far below the launch
    # floor, so the time per call is the host's (Python, dispatcher, autograd) per operator: divide
    # by the chain's kernel count (configs/frameworks/hf-transformers.yaml) for the per-kernel
    # dispatch cost offsim does not model yet (docs/models.md).
    for h in (896, 4096):
        x = leaf(16, h)
        add("LlamaRMSNorm", f"16x{h}", [x], LlamaRMSNorm(h).to(DEV).to(BF16))
        add("NewGELUActivation", f"16x{h}", [x], NewGELUActivation())
    for tokens in ((4096,) if quick else (4096, 16384)):
        for h in (896, 2048, 3072, 5120):
            x = leaf(tokens, h)
            norm = LlamaRMSNorm(h).to(DEV).to(BF16)
            weight = torch.ones(h, device=DEV, dtype=BF16, requires_grad=True)
            add("LlamaRMSNorm", f"{tokens}x{h}", [x], norm)
            add("rms_norm", f"{tokens}x{h}", [x], lambda x, w=weight, h=h: F.rms_norm(x, (h,), w))
            add("layer_norm", f"{tokens}x{h}", [x], lambda x, h=h: F.layer_norm(x, (h,)))
            add("dropout", f"{tokens}x{h}", [x], lambda x: F.dropout(x, 0.1, training=True))
        for f in (4864, 8192, 14336):
            x = leaf(tokens, f)
            add("NewGELUActivation", f"{tokens}x{f}", [x], NewGELUActivation())
            add("gelu_tanh", f"{tokens}x{f}", [x], lambda x: F.gelu(x, approximate="tanh"))
            gate, up = leaf(tokens, f), leaf(tokens, f)
            add("swiglu", f"{tokens}x{f}", [gate, up], lambda g, u: F.silu(g) * u)
            both = leaf(tokens, 2 * f)
            add("silu_mul", f"{tokens}x{f}", [both],
                lambda x: F.silu(x[:, : x.shape[1] // 2]) * x[:, x.shape[1] // 2:])
        for heads, d in ((32, 64), (24, 128), (8, 256)):
            cos = torch.randn(1, tokens, d, device=DEV, dtype=BF16)
            sin = torch.randn(1, tokens, d, device=DEV, dtype=BF16)
            q = leaf(1, heads, tokens, d)
            add("apply_rotary_pos_emb(q,k)", f"{tokens}x{heads}x{d}", [q],
                lambda q, c=cos, s=sin: sum(apply_rotary_pos_emb(q, q, c, s)))
        for vocab in (32000, 50304, 128256, 151936, 256000):
            if tokens * vocab > 16384 * 151936:
                continue
            labels = torch.randint(0, vocab, (tokens,), device=DEV)
            z = leaf(tokens, vocab)
            add("cross_entropy(logits.float())", f"{tokens}x{vocab}", [z],
                lambda z, y=labels: F.cross_entropy(z.float(), y))
            del z
            torch.cuda.empty_cache()
    return rows


def sdpa(quick):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = [("DEFAULT", None), ("FLASH_ATTENTION", SDPBackend.FLASH_ATTENTION),
                ("CUDNN_ATTENTION", SDPBackend.CUDNN_ATTENTION), ("EFFICIENT_ATTENTION", SDPBackend.EFFICIENT_ATTENTION)]
    rows = []
    tokens = 16384
    for name, backend in backends:
        for d in ((64, 128) if quick else (64, 80, 128, 256)):
            for seq in ((2048,) if quick else (1024, 2048, 4096, 8192)):
                for heads, kv in ((16, 16), (32, 8)):
                    b = tokens // seq
                    q = leaf(b, heads, seq, d)
                    k, v = leaf(b, kv, seq, d), leaf(b, kv, seq, d)

                    def fn(q, k, v, gqa=kv < heads):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
                    try:
                        if backend is None:
                            tf, tb = forward_backward([q, k, v], fn)
                        else:
                            with sdpa_kernel(backend):
                                tf, tb = forward_backward([q, k, v], fn)
                    except RuntimeError as e:  # a backend that cannot run this shape
                        print(name, d, seq, heads, kv, "skipped:", e, flush=True)
                        continue
                    flops = 2.0 * b * heads * seq * seq * d  # causal: half of QK^T and PV's 4 b h s^2 d
                    rows.append(dict(backend=name, batch=b, heads=heads, kv_heads=kv, seq=seq, head_dim=d,
                                     fwd_s=tf, bwd_s=tb, fwd_tflops=flops / tf / 1e12,
                                     bwd_tflops=2.5 * flops / tb / 1e12))
                    print(rows[-1], flush=True)
    return rows


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(path, len(rows), "rows", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device-kind", required=True)
    ap.add_argument("--quick", action="store_true", help="a few shapes only (a smoke test)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    print(torch.cuda.get_device_name(), torch.__version__, torch.version.cuda, flush=True)
    write(os.path.join(a.out, f"{a.device_kind}-hf-modules.csv"), hf_modules(a.quick))
    write(os.path.join(a.out, f"{a.device_kind}-sdpa-attention.csv"), sdpa(a.quick))


if __name__ == "__main__":
    main()
