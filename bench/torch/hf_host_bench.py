#!/usr/bin/env python3
"""The host's time per decoder layer of transformers' own model classes, at a size where every
kernel is below the launch floor (1 x 16 tokens): what the Python modules, the dispatcher and
autograd cost on the host per layer, forward and backward, with and without gradient checkpointing.

  python3 bench/torch/hf_host_bench.py --out DIR --device-kind h100-sxm

Writes <kind>-hf-host.csv: model, config, layers, mode, host_s (median of 20 calls after 5 warm-up)
  mode forward_nograd      model(input_ids) under no_grad, eval mode
  mode forward             model(input_ids, labels=input_ids), train mode (dropout live), autograd on
  mode backward            loss.backward() of that forward
  mode forward_ckpt, backward_ckpt   the same with gradient_checkpointing_enable(use_reentrant=False)
Each is timed between two torch.cuda.synchronize() calls; at 16 tokens the GPU waits on the host,
so the time is the host's. Each model is built with 2 and with 4 layers (num_hidden_layers / n_layer
overridden): a layer's host time is (T(4) - T(2)) / 2, the rest (embedding, final norm, head,
loss) T(2) - 2 x that. Also per-operator costs this model's chains lack: view, transpose, reshape,
an nn.Module call (nn.Identity), dropout, in <kind>-host-dispatch-extra.csv, and (gap_ops, not run
yet) a view's backward node and torch.utils.checkpoint's non-reentrant overhead.
"""
import argparse
import os
import shutil
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

from bench_io import write_csv

HERE = os.path.dirname(os.path.abspath(__file__))
REAL_HF = os.path.join(HERE, "..", "..", "tests", "data", "real-inputs", "hf")
MODELS = ["gpt2.config.json", "pythia-410m-finetune.config.json", "qwen2.5-0.5b-instruct.config.json",
          "gpt2-xl.config.json", "gemma-2b.config.json", "phi-2.config.json", "llama-3.2-3b-instruct.config.json"]


def median_host(fn, reps=20, warm=5):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def build(config_file, layers):
    from transformers import AutoConfig, AutoModelForCausalLM
    folder = tempfile.mkdtemp()
    shutil.copy(os.path.join(REAL_HF, config_file), os.path.join(folder, "config.json"))
    config = AutoConfig.from_pretrained(folder)
    shutil.rmtree(folder)
    config.use_cache = False
    for key in ("num_hidden_layers", "n_layer"):
        if hasattr(config, key):
            setattr(config, key, layers)
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16)
        except TypeError:
            model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", torch_dtype=torch.bfloat16)
    return model.to(torch.bfloat16), config.vocab_size


def model_rows(kind, config_file, layers):
    model, vocab = build(config_file, layers)
    ids = torch.randint(0, vocab, (1, 16), device="cuda")
    rows = []

    def add(mode, seconds):
        rows.append(dict(device_kind=kind, model=config_file.replace(".config.json", ""), config=config_file,
                         layers=layers, mode=mode, host_s=repr(seconds)))
        print(rows[-1], flush=True)

    model.eval()
    with torch.no_grad():
        add("forward_nograd", median_host(lambda: model(input_ids=ids)))
    model.train()
    for ckpt in (False, True):
        if ckpt:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        suffix = "_ckpt" if ckpt else ""
        add("forward" + suffix, median_host(lambda: model(input_ids=ids, labels=ids).loss))
        holder = {}

        def fwd():
            holder["loss"] = model(input_ids=ids, labels=ids).loss

        def both():
            for p in model.parameters():
                p.grad = None
            fwd()
            holder["loss"].backward()
        t_both = median_host(both)
        t_fwd = median_host(lambda: (fwd(), [setattr(p, "grad", None) for p in model.parameters()]))
        add("backward" + suffix, t_both - t_fwd)
    del model
    torch.cuda.empty_cache()
    return rows


def extra_ops(kind):
    x = torch.randn(16, 896, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    ident = torch.nn.Identity()
    ops = [("view", lambda: x.view(16, 14, 64)), ("transpose", lambda: x.transpose(0, 1)),
           ("reshape", lambda: x.reshape(16, 14, 64)), ("module_call_identity", lambda: ident(x)),
           ("dropout", lambda: F.dropout(x, 0.1, training=True)), ("contiguous_copy", lambda: x.t().contiguous())]
    rows = []
    calls = 2000
    for name, fn in ops:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        rows.append(dict(device_kind=kind, op=name, mode="forward_grad", calls=calls,
                         host_s_per_call=repr((time.perf_counter() - t0) / calls)))
        print(rows[-1], flush=True)
    rows += gap_ops(kind, x)
    return rows


def gap_ops(kind, x):
    """What offsim's python_host leaves out for want of a measurement (docs/models.md):
      view_chain backward   one ViewBackward0 node of a 64-view chain's backward, per node:
                            ((forward + backward) - forward) / 64, as dispatch_bench's mul_chain
      checkpoint_identity   torch.utils.checkpoint.checkpoint(nn.Identity, x, use_reentrant=False),
                            forward (its frame, saved-tensor hooks, RNG state) minus a bare
                            module call: the per-layer overhead of a non-reentrant checkpoint
      checkpoint_mul backward  forward + backward of checkpoint(x * 2) minus those of x * 2: both
                            overheads, checkpoint_identity's forward one included (subtract it
                            for the recomputation's hooks and checks; the recomputed mul is in it)
    """
    from torch.utils.checkpoint import checkpoint
    ident = torch.nn.Identity()
    chain = 64
    calls = 200
    rows = []

    def timed(fn, n):
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n

    def view_chain():
        y = x
        for i in range(chain):
            y = y.view(16, 896) if i % 2 else y.view(16, 14, 64)
        return y.float().sum()

    def view_both():
        x.grad = None
        view_chain().backward()

    def mul_once():
        x.grad = None
        (x * 2.0).float().sum().backward()

    def ckpt_mul():
        x.grad = None
        checkpoint(lambda t: t * 2.0, x, use_reentrant=False).float().sum().backward()

    per_view = (timed(view_both, calls) - timed(view_chain, calls)) / chain
    ckpt_fwd = timed(lambda: checkpoint(ident, x, use_reentrant=False), calls) - timed(lambda: ident(x), calls)
    ckpt_bwd = timed(ckpt_mul, calls) - timed(mul_once, calls)
    for op, mode, n, t in (("view_chain", "backward", calls * chain, per_view),
                           ("checkpoint_identity", "forward_grad", calls, ckpt_fwd),
                           ("checkpoint_mul", "backward", calls, ckpt_bwd)):
        rows.append(dict(device_kind=kind, op=op, mode=mode, calls=n, host_s_per_call=repr(t)))
        print(rows[-1], flush=True)
    return rows




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device-kind", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    write_csv(os.path.join(a.out, f"{a.device_kind}-host-dispatch-extra.csv"), extra_ops(a.device_kind))
    rows = []
    for config_file in MODELS:
        for layers in (2, 4):
            try:
                rows += model_rows(a.device_kind, config_file, layers)
            except Exception as e:  # say so and go on
                print("failed", config_file, layers, e, flush=True)
            write_csv(os.path.join(a.out, f"{a.device_kind}-hf-host.csv"), rows)


if __name__ == "__main__":
    main()
