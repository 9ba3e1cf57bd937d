#!/usr/bin/env python3
"""Training steps of Hugging Face transformers' own model classes on one GPU, built from real
config.json files (tests/data/real-inputs/hf/), for validation of training.framework hf-transformers.

  python3 bench/torch/hf_training_bench.py --out DIR --device-kind h100-sxm [--quick]

Writes <kind>-hf-training.csv, one row per (model, seq, micro_batch, gradient checkpointing):
  model, config, params, seq, micro_batch, checkpointing, fwd_s, bwd_s, step_s, host_fwd_s,
  peak_memory_bytes, status

What runs (the way a user of transformers trains without a Trainer):
- AutoModelForCausalLM.from_config(config.json), attn_implementation "sdpa", bf16 weights, random
  init on the GPU, model.train() (the config's dropout keys are live), use_cache off;
- forward = model(input_ids, labels=input_ids) (the model's own loss: logits upcast to fp32,
  shifted cross-entropy), backward = loss.backward();
- step = a DeepSpeed BF16_Optimizer-style step: fp32 copy of each bf16 gradient, fused AdamW on
  fp32 master weights, master copied back to the bf16 weights (as transformer_bench.py does);
- gradient checkpointing through model.gradient_checkpointing_enable(use_reentrant=False), which
  recomputes each decoder layer's forward in the backward.

Timing: CUDA events, mean of --steps (8) steps after 2 warm-up steps. host_fwd_s is the host's wall clock for
the forward call alone (no synchronisation inside it): where it is close to fwd_s the forward is
bound by the host's per-operator dispatch, not by the GPU. peak_memory_bytes is
torch.cuda.max_memory_allocated over the case (tensors, not the allocator's reserve). A case that
does not fit is a row with status out_of_memory (a feasibility data point).

These are end-to-end times: they validate (configs/validation/h100-hf-transformers), never fit.
"""
import argparse
import gc
import os
import shutil
import sys
import tempfile
import time

import torch

from bench_io import write_csv

HERE = os.path.dirname(os.path.abspath(__file__))
REAL_HF = os.path.join(HERE, "..", "..", "tests", "data", "real-inputs", "hf")

# (config file, sequence lengths): the families the hf-transformers profile covers (GPT-2's
# gelu_new and dropouts, Qwen2.5's 151,936 vocabulary, Llama 3.2, Phi-2, Gemma, GPT-NeoX).
MODELS = [
    ("gpt2.config.json", (1024,)),
    ("pythia-410m-finetune.config.json", (1024, 2048)),
    ("qwen2.5-0.5b-instruct.config.json", (1024, 2048, 4096)),
    ("gpt2-xl.config.json", (1024,)),
    ("gemma-2b.config.json", (1024, 2048, 4096)),
    ("phi-2.config.json", (1024, 2048)),
    ("llama-3.2-3b-instruct.config.json", (1024, 2048, 4096)),
]
MICRO_BATCHES = (1, 4)


def build(config_file):
    from transformers import AutoConfig, AutoModelForCausalLM
    folder = tempfile.mkdtemp()
    shutil.copy(os.path.join(REAL_HF, config_file), os.path.join(folder, "config.json"))
    config = AutoConfig.from_pretrained(folder)
    shutil.rmtree(folder)
    config.use_cache = False
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16)
        except TypeError:
            model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", torch_dtype=torch.bfloat16)
    model = model.to(torch.bfloat16)
    model.train()
    return model, config.vocab_size


def case_row(model, vocab, seq, mb, checkpointing, steps):
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()
    params = [p for p in model.parameters() if p.requires_grad]
    master = [p.detach().float().clone() for p in params]
    opt = torch.optim.AdamW(master, lr=1e-5, weight_decay=0.0, fused=True)
    ids = torch.randint(0, vocab, (mb, seq), device="cuda")
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    sums = [0.0, 0.0, 0.0]
    host_fwd = 0.0
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for step in range(steps + 2):
        ev[0].record()
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        t1 = time.perf_counter()
        ev[1].record()
        loss.backward()
        ev[2].record()
        for m, p in zip(master, params):
            m.grad = p.grad.float()
        opt.step()
        with torch.no_grad():
            for m, p in zip(master, params):
                p.copy_(m)
                p.grad = None
        ev[3].record()
        ev[3].synchronize()
        if step >= 2:
            host_fwd += t1 - t0
            for i in range(3):
                sums[i] += ev[i].elapsed_time(ev[i + 1]) / 1e3
    peak = torch.cuda.max_memory_allocated()
    del master, opt, ids, loss
    return dict(fwd_s=f"{sums[0] / steps:.6g}", bwd_s=f"{sums[1] / steps:.6g}", step_s=f"{sums[2] / steps:.6g}",
                host_fwd_s=f"{host_fwd / steps:.6g}", peak_memory_bytes=peak, status="ok")




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device-kind", required=True)
    ap.add_argument("--quick", action="store_true", help="two models, one shape each (a smoke test)")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per case (after 2 warm-up steps)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    import transformers
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "transformers", transformers.__version__,
          file=sys.stderr, flush=True)
    path = os.path.join(a.out, f"{a.device_kind}-hf-training.csv")
    rows = []
    t_start = time.time()
    for config_file, seqs in MODELS[: 2 if a.quick else None]:
        name = config_file.replace(".config.json", "")
        try:
            model, vocab = build(config_file)
        except Exception as e:  # a family this transformers cannot build: say so, go on
            rows.append(dict(device_kind=a.device_kind, model=name, config=config_file, status=f"build_failed: {e}"))
            print(rows[-1], file=sys.stderr, flush=True)
            write_csv(path, rows)
            continue
        n_params = sum(p.numel() for p in model.parameters())
        for seq in seqs[:1] if a.quick else seqs:
            for mb in MICRO_BATCHES[:1] if a.quick else MICRO_BATCHES:
                for checkpointing in (False, True):
                    row = dict(device_kind=a.device_kind, model=name, config=config_file, params=n_params, seq=seq,
                               micro_batch=mb, checkpointing=int(checkpointing))
                    torch.cuda.empty_cache()
                    try:
                        row.update(case_row(model, vocab, seq, mb, checkpointing, a.steps))
                    except torch.cuda.OutOfMemoryError:
                        for p in model.parameters():
                            p.grad = None
                        gc.collect()
                        torch.cuda.empty_cache()
                        row.update(status="out_of_memory")
                    rows.append(row)
                    print(row, f"{time.time() - t_start:.0f} s", file=sys.stderr, flush=True)
                    write_csv(path, rows)
        del model
        torch.cuda.empty_cache()
    print(f"hf training: {len(rows)} rows, {time.time() - t_start:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
