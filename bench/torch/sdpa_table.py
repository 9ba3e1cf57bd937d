#!/usr/bin/env python3
"""Write a device table's `sdpa:` section from hf_modules_bench.py's (or method_attn_bench.py's) SDPA CSV.

PyTorch's F.scaled_dot_product_attention, causal, bf16, as the backend PyTorch picks by default
(rows `DEFAULT`): forward and backward TFLOP/s by head size, sequence and whether K/V heads are
shared (GQA), counted as the CSV counts them (causal FLOPs 2 b h s^2 d forward, backward 2.5 x
that). offsim interpolates them linearly in head size and in log sequence, held at the edges.

  sdpa_table.py SDPA_CSV --out configs/calibration/h100-sxm.sdpa.yaml
"""
import argparse
import csv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sdpa_csv")
    ap.add_argument("--backends", default="DEFAULT,FLASH_ATTENTION",
                    help="backends written: the default pick, and FlashAttention (taken with dropout)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    backends = a.backends.split(",")
    rows = [r for r in csv.DictReader(open(a.sdpa_csv)) if r["backend"] in backends]
    rows.sort(key=lambda r: (backends.index(r["backend"]), int(r["kv_heads"]) < int(r["heads"]),
                             int(r["head_dim"]), int(r["seq"])))
    lines = [
        "# Written by bench/torch/sdpa_table.py: do not edit by hand, re-run the command.",
        f'command: "bench/torch/sdpa_table.py {a.sdpa_csv} --backends {a.backends} --out {a.out}"',
        f'source: "{a.sdpa_csv}, backends {a.backends}: F.scaled_dot_product_attention causal bf16, batch x seq = '
        f'16,384 tokens; TFLOP/s of the causal count (2 b h s^2 d forward, 2.5 x that backward)"',
        "points:",
    ]
    for r in rows:
        gqa = "true" if int(r["kv_heads"]) < int(r["heads"]) else "false"
        lines.append(f'  - {{backend: {r["backend"].lower()}, head_dim: {r["head_dim"]}, seq: {r["seq"]}, gqa: {gqa}, '
                     f'forward: "{float(r["fwd_tflops"]):.1f} TFLOP/s", backward: "{float(r["bwd_tflops"]):.1f} TFLOP/s"}}')
    with open(a.out, "w") as out:
        out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
