#!/usr/bin/env python3
"""GPT layer and training-step timings in PyTorch on one GPU, for offsim.

Three CSVs (bench/torch/README.md):

  ops       the non-GEMM kernels of a Megatron-style GPT layer, one at a time, forward and
            backward, at the layer's real shapes (micro-batch x seq tokens, hidden, heads / tp):
            layer norm, GeLU, the eager attention's mask + softmax + dropout, dropout, residual
            add; plus the layer's GEMMs through torch.matmul. Microbenchmark level: the bytes each
            kernel moves and its time give the memory-bound efficiency and the per-kernel cost
            that offsim's kernel model uses (calibration).
  layers    one whole layer (forward, forward + backward), eager attention or flash
            (scaled_dot_product_attention), at the same shapes (validation of the layer model).
  training  whole training iterations of GPT models on this one GPU, the way DeepSpeed's bf16
            optimizer runs them (bf16 weights and gradients, fp32 master weights, fp32 AdamW
            states, gradients up-cast, master weights cast back): forward, backward and optimizer
            step timed separately (validation of end-to-end predictions; never fitted).

Each timing: warm-up, then CUDA-event timed repetitions; the mean is written.

  python3 transformer_bench.py --out DIR [--device-kind h100-sxm] [--quick]
"""
import argparse
import csv
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

DT = torch.bfloat16


def timed(fn, reps=10, warmup=3):
    """Mean seconds per fn() call, CUDA events around `reps` calls after `warmup`."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / 1e3 / reps


def fwd_bwd_times(make_inputs, fn, reps=10):
    """(forward s, backward s) of fn on fresh leaf inputs; backward = (fwd + bwd) - fwd."""
    inputs = make_inputs()
    out = fn(*inputs)
    grad = torch.randn_like(out)

    def forward():
        with torch.no_grad():
            fn(*inputs)

    def forward_backward():
        o = fn(*inputs)
        o.backward(grad)

    f = timed(forward, reps)
    fb = timed(forward_backward, reps)
    return f, max(fb - f, 0.0)


class Layer(torch.nn.Module):
    """Megatron GPT layer on one tensor-parallel rank: heads and FFN split by tp."""

    def __init__(self, hidden, heads, tp, flash, dropout=0.1):
        super().__init__()
        self.h, self.heads, self.tp, self.flash, self.p = hidden, heads // tp, tp, flash, dropout
        self.head_dim = hidden // heads
        self.ln1 = torch.nn.LayerNorm(hidden)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden // tp)
        self.proj = torch.nn.Linear(hidden // tp, hidden)
        self.ln2 = torch.nn.LayerNorm(hidden)
        self.fc1 = torch.nn.Linear(hidden, 4 * hidden // tp)
        self.fc2 = torch.nn.Linear(4 * hidden // tp, hidden)

    def attention(self, x):
        s, b, _ = x.shape
        qkv = self.qkv(x).view(s, b, self.heads, 3 * self.head_dim)
        q, k, v = qkv.split(self.head_dim, dim=-1)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # b, heads, s, d
        if self.flash:
            ctx = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p, is_causal=True)
        else:
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            probs = F.dropout(torch.softmax(scores.masked_fill(mask, -10000.0), dim=-1), self.p)
            ctx = torch.matmul(probs, v)
        ctx = ctx.permute(2, 0, 1, 3).reshape(s, b, self.heads * self.head_dim)
        return self.proj(ctx)

    def forward(self, x):
        x = x + F.dropout(self.attention(self.ln1(x)), self.p)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh")), self.p)


class GPT(torch.nn.Module):
    def __init__(self, layers, hidden, heads, vocab, seq, flash):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.pos = torch.nn.Embedding(seq, hidden)
        self.layers = torch.nn.ModuleList(Layer(hidden, heads, 1, flash) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(hidden)

    def forward(self, tokens):  # tokens: s, b
        s = tokens.shape[0]
        x = self.embed(tokens) + self.pos(torch.arange(s, device=tokens.device))[:, None, :]
        for layer in self.layers:
            x = layer(x)
        logits = torch.matmul(self.ln(x), self.embed.weight.t())
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tokens.view(-1))


def op_rows(device_kind, hidden, heads, seq, mb, tp):
    dev = "cuda"
    t = seq * mb
    rows = []

    def add(op, elements, bytes_fwd, bytes_bwd, f, b):
        rows.append(dict(device_kind=device_kind, op=op, hidden=hidden, heads=heads, seq=seq, micro_batch=mb, tp=tp,
                         elements=elements, bytes_fwd=bytes_fwd, bytes_bwd=bytes_bwd, fwd_s=f"{f:.9g}",
                         bwd_s=f"{b:.9g}"))

    ln = torch.nn.LayerNorm(hidden, device=dev, dtype=DT)
    e = t * hidden
    f, b = fwd_bwd_times(lambda: [torch.randn(t, hidden, device=dev, dtype=DT, requires_grad=True)], ln)
    add("layernorm", e, 4 * e, 6 * e, f, b)  # fwd: read x, write y; bwd: read x, dy, write dx
    ffn = t * 4 * hidden // tp
    f, b = fwd_bwd_times(lambda: [torch.randn(t, 4 * hidden // tp, device=dev, dtype=DT, requires_grad=True)],
                         lambda x: F.gelu(x, approximate="tanh"))
    add("gelu", ffn, 4 * ffn, 6 * ffn, f, b)
    e_att = mb * (heads // tp) * seq * seq
    mask = torch.ones(seq, seq, dtype=torch.bool, device=dev).triu(1)

    def softmax_path(x):
        return F.dropout(torch.softmax(x.masked_fill(mask, -10000.0), dim=-1), 0.1)

    f, b = fwd_bwd_times(
        lambda: [torch.randn(mb, heads // tp, seq, seq, device=dev, dtype=DT, requires_grad=True)], softmax_path)
    # mask fill (read, write), softmax (read, write), dropout (read, write, 1 B mask): bwd likewise
    add("attention_softmax", e_att, 13 * e_att, 13 * e_att, f, b)
    f, b = fwd_bwd_times(lambda: [torch.randn(t, hidden, device=dev, dtype=DT, requires_grad=True)],
                         lambda x: F.dropout(x, 0.1))
    add("dropout", e, 5 * e, 5 * e, f, b)
    f, b = fwd_bwd_times(
        lambda: [torch.randn(t, hidden, device=dev, dtype=DT, requires_grad=True),
                 torch.randn(t, hidden, device=dev, dtype=DT, requires_grad=True)], lambda x, y: x + y)
    add("residual_add", e, 6 * e, 4 * e, f, b)
    # The layer's GEMMs (forward shapes; backward = the two gradient GEMMs).
    for name, n_out, k_in in (("gemm_qkv", 3 * hidden // tp, hidden), ("gemm_proj", hidden, hidden // tp),
                              ("gemm_fc1", 4 * hidden // tp, hidden), ("gemm_fc2", hidden, 4 * hidden // tp)):
        f, b = fwd_bwd_times(
            lambda: [torch.randn(t, k_in, device=dev, dtype=DT, requires_grad=True),
                     torch.randn(k_in, n_out, device=dev, dtype=DT, requires_grad=True)], torch.matmul)
        add(name, t * n_out, 2 * (t * k_in + k_in * n_out + t * n_out), 0, f, b)
    return rows


def layer_rows(device_kind, hidden, heads, seq, mb, tp):
    rows = []
    for flash in (False, True):
        layer = Layer(hidden, heads, tp, flash).cuda().to(DT)
        f, b = fwd_bwd_times(lambda: [torch.randn(seq, mb, hidden, device="cuda", dtype=DT, requires_grad=True)],
                             layer)
        rows.append(dict(device_kind=device_kind, hidden=hidden, heads=heads, seq=seq, micro_batch=mb, tp=tp,
                         attention="flash" if flash else "eager", fwd_s=f"{f:.9g}", bwd_s=f"{b:.9g}"))
        del layer
    return rows


def training_row(device_kind, name, layers, hidden, heads, vocab, seq, mb, flash, steps):
    """One model's training iteration, DeepSpeed bf16-optimizer style; None if out of memory."""
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    try:
        model = GPT(layers, hidden, heads, vocab, seq, flash).cuda().to(DT)
        params = [p for p in model.parameters()]
        master = [p.detach().float().clone() for p in params]
        opt = torch.optim.AdamW(master, lr=1e-4, weight_decay=0.01, fused=True)
        tokens = torch.randint(0, vocab, (seq, mb), device="cuda")
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        sums = [0.0, 0.0, 0.0]
        for step in range(steps + 2):
            ev[0].record()
            loss = model(tokens)
            ev[1].record()
            loss.backward()
            ev[2].record()
            for m, p in zip(master, params):
                m.grad = p.grad.float()  # DeepSpeed bf16 optimizer: fp32 gradient copy
            opt.step()
            with torch.no_grad():
                for m, p in zip(master, params):
                    p.copy_(m)  # cast the master weights back to bf16
                    p.grad = None
            ev[3].record()
            ev[3].synchronize()
            if step >= 2:
                for i in range(3):
                    sums[i] += ev[i].elapsed_time(ev[i + 1]) / 1e3
        n_params = sum(p.numel() for p in params)
        peak = torch.cuda.max_memory_allocated()
        del model, params, master, opt
        return dict(device_kind=device_kind, model=name, layers=layers, hidden=hidden, heads=heads, vocab=vocab,
                    seq=seq, micro_batch=mb, attention="flash" if flash else "eager", params=n_params,
                    fwd_s=f"{sums[0] / steps:.6g}", bwd_s=f"{sums[1] / steps:.6g}",
                    step_s=f"{sums[2] / steps:.6g}", peak_memory_bytes=peak, status="ok")
    except torch.cuda.OutOfMemoryError:
        return dict(device_kind=device_kind, model=name, layers=layers, hidden=hidden, heads=heads, vocab=vocab,
                    seq=seq, micro_batch=mb, attention="flash" if flash else "eager", status="out_of_memory")


def write(path, rows):
    tmp = path + ".tmp"
    fields = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device-kind", default="unknown")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--parts", default="ops,layers,training")
    ap.add_argument("--models", default="", help="comma-separated training models (default: all)")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    parts = a.parts.split(",")
    # (hidden, heads): GPT-3 350M/1.3B/2.7B/6.7B/13B/175B-like and NeoX-20B; seq 2048.
    shapes = [(1024, 16), (2048, 16), (2560, 32), (4096, 32), (5120, 40), (6144, 64), (12288, 96)]
    cases = []
    for hidden, heads in shapes:
        for tp in (1, 2, 4, 8):
            if heads % tp or (hidden < 4096 and tp > 1):
                continue
            for mb in (1, 4):
                cases.append((hidden, heads, 2048, mb, tp))
    if a.quick:
        cases = cases[:3]
    t0 = time.time()
    if "ops" in parts:
        rows = []
        for c in cases:
            rows += op_rows(a.device_kind, *c)
        write(os.path.join(a.out, f"{a.device_kind}-torch-ops.csv"), rows)
        print(f"ops: {len(rows)} rows, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    if "layers" in parts:
        rows = []
        for c in cases:
            rows += layer_rows(a.device_kind, *c)
        write(os.path.join(a.out, f"{a.device_kind}-torch-layers.csv"), rows)
        print(f"layers: {len(rows)} rows, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    if "training" in parts:
        models = [("gpt-125m", 12, 768, 12), ("gpt-350m", 24, 1024, 16), ("gpt-760m", 24, 1536, 16),
                  ("gpt-1.3b", 24, 2048, 16), ("gpt-2.7b", 32, 2560, 32)]
        rows = []
        if a.models:
            models = [m for m in models if m[0] in a.models.split(",")]
        for name, layers, hidden, heads in models[: 2 if a.quick else None]:
            for mb in (1, 2, 4, 8):
                for flash in (False, True):
                    r = training_row(a.device_kind, name, layers, hidden, heads, 50304, 2048, mb, flash,
                                     2 if a.quick else 5)
                    rows.append(r)
                    print(r, file=sys.stderr, flush=True)
                    write(os.path.join(a.out, f"{a.device_kind}-torch-training{'-' + a.models if a.models else ''}.csv"), rows)
        print(f"training: {len(rows)} rows, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
