#!/usr/bin/env python3
"""The host's cost per eager PyTorch operator: what a chain of small kernels costs when the GPU
is faster than the Python loop that launches it (transformers' eager RMSNorm, rotary, gelu_new).

  python3 bench/torch/dispatch_bench.py --out DIR --device-kind h100-sxm

Writes <kind>-host-dispatch.csv: op, mode, calls, host_s_per_call, gpu_s_per_call
  mode forward_nograd: the op under torch.no_grad() (Python + dispatcher + launch);
  mode forward_grad:   the op on a requires_grad input (the autograd node is recorded too);
  mode backward:       one node of a 64-op chain's backward (autograd engine + launch), per op.
Inputs are 16 x 896 bf16 (every kernel far below the launch floor). host_s_per_call is the wall
clock of 2,000 calls between two synchronisations, divided by the calls; gpu_s_per_call the CUDA
events around the same calls. Where the two agree, the GPU waited on the host: the host's dispatch
is the floor of every eager kernel's time.
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F

from bench_io import write_csv

OPS = [
    ("add", lambda x, w: x + x),
    ("mul", lambda x, w: x * x),
    ("silu", lambda x, w: F.silu(x)),
    ("to_float32", lambda x, w: x.to(torch.float32)),
    ("pow_mean", lambda x, w: x.pow(2).mean(-1, keepdim=True)),
    ("rsqrt", lambda x, w: torch.rsqrt(x)),
    ("cat", lambda x, w: torch.cat((x, x), dim=-1)),
    ("neg", lambda x, w: -x),
    ("linear", lambda x, w: F.linear(x, w)),
    ("layer_norm", lambda x, w: F.layer_norm(x, (x.shape[-1],))),
    ("softmax", lambda x, w: torch.softmax(x, dim=-1)),
]


def measure(fn, calls):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    wall = time.perf_counter() - t0
    return wall / calls, start.elapsed_time(end) / 1e3 / calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device-kind", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    x = torch.randn(16, 896, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(896, 896, device="cuda", dtype=torch.bfloat16)
    xg = x.clone().requires_grad_(True)
    wg = w.clone().requires_grad_(True)
    calls = 2000
    rows = []

    def add(op, mode, n, pair):
        rows.append(dict(device_kind=a.device_kind, op=op, mode=mode, calls=n, host_s_per_call=repr(pair[0]),
                         gpu_s_per_call=repr(pair[1])))
        print(op, mode, f"host {pair[0] * 1e6:.2f} us, gpu {pair[1] * 1e6:.2f} us", flush=True)

    for op, fn in OPS:
        with torch.no_grad():
            add(op, "forward_nograd", calls, measure(lambda: fn(x, w), calls))
        add(op, "forward_grad", calls, measure(lambda: fn(xg, wg), calls))
    # Backward: a chain of 64 multiplies by a constant; (forward + backward) minus forward, per op.
    chain = 64

    def forward_chain():
        y = xg
        for _ in range(chain):
            y = y * 1.0001
        return y.sum()

    def both():
        xg.grad = None
        forward_chain().backward()
    reps = 100
    f_host, f_gpu = measure(forward_chain, reps)
    b_host, b_gpu = measure(both, reps)
    add("mul_chain", "backward", reps * chain, ((b_host - f_host) / chain, (b_gpu - f_gpu) / chain))
    path = os.path.join(a.out, f"{a.device_kind}-host-dispatch.csv")
    write_csv(path, rows)
    print(path, len(rows), "rows", flush=True)


if __name__ == "__main__":
    main()
