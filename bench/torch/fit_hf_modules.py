#!/usr/bin/env python3
"""Fit the efficiency classes of Hugging Face transformers' eager kernel chains from module timings.

Reads hf_modules_bench.py's CSV (module, shape, fwd_s, bwd_s, elements), the same GPU's streaming
copy rate (membound_bench's mem_copy at its largest size) and launch floor, and the chains offsim
costs each module with (configs/frameworks/hf-transformers.yaml: the bytes every kernel moves per
element). For each module class, the relative efficiency r (forward and backward) such that the
chain's kernels, each max(bytes / (stream x r), launch), add up to the measured time, found by
bisection; the median over the rows of at least --min-elements elements is written (smaller rows
are dominated by the host's per-operator dispatch, which offsim does not model), with the spread.

The benchmark's own extra kernels are charged at the plain streaming rate before fitting:
apply_rotary_pos_emb(q, q) runs the chain on q twice and sums the two outputs (0 + q_embed, then
+ k_embed: 4 + 6 B per element forward), and backward adds q's two chains' gradients (6 B).

  fit_hf_modules.py MODULES_CSV MEMBOUND_CSV PROFILE_YAML --launch-us 4.36 \\
      --out configs/calibration/hf-transformers.kernels.yaml
"""
import argparse
import csv
import statistics
import sys

import yaml

# benchmark module -> (profile chain, chain runs per row, extra forward / backward bytes per element)
MODULES = {
    "LlamaRMSNorm": ("rmsnorm", 1, 0.0, 0.0),
    "NewGELUActivation": ("gelu_new", 1, 0.0, 0.0),
    "apply_rotary_pos_emb(q,k)": ("rotary", 2, 10.0, 6.0),
    "cross_entropy(logits.float())": ("loss", 1, 0.0, 0.0),
}


def rows_of(shape):
    return int(shape.split("x")[0])


def chain_time(chain, n, rows, stream, launch, r):
    t = 0.0
    for k in chain:
        b = k["bytes"] * n if k["bytes"] > 0 else 8.0 * rows
        rate = stream * (r if k.get("class") else 1.0)
        t += max(b / rate, launch)
    return t


def fit(chain, runs, n, rows, extra_bytes, measured, stream, launch):
    fixed = max(extra_bytes * n / stream, launch) if extra_bytes else 0.0
    lo, hi = 0.01, 10.0
    if runs * chain_time(chain, n, rows, stream, launch, hi) + fixed >= measured:
        return None  # the launch floors alone exceed the measurement
    for _ in range(100):
        mid = (lo * hi) ** 0.5
        if runs * chain_time(chain, n, rows, stream, launch, mid) + fixed > measured:
            lo = mid
        else:
            hi = mid
    return (lo * hi) ** 0.5


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("modules_csv")
    ap.add_argument("membound_csv")
    ap.add_argument("profile_yaml")
    ap.add_argument("--launch-us", type=float, required=True, help="the device's kernel_launch (its table)")
    ap.add_argument("--min-elements", type=int, default=1 << 24)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    copies = [r for r in csv.DictReader(open(a.membound_csv)) if r["benchmark"] == "mem_copy"]
    largest = max(copies, key=lambda r: int(r["bytes"]))
    stream = int(largest["bytes"]) / float(largest["time_s"])
    launch = a.launch_us * 1e-6
    profile = yaml.safe_load(open(a.profile_yaml))["modules"]
    fits = {}
    for r in csv.DictReader(open(a.modules_csv)):
        if r["module"] not in MODULES or int(r["elements"]) < a.min_elements:
            continue
        name, runs, extra_f, extra_b = MODULES[r["module"]]
        chain = profile[name]
        classes = {k["class"] for k in chain["forward"] + chain["backward"] if k.get("class")}
        if len(classes) != 1:
            sys.exit(f"fit_hf_modules: chain {name} names {sorted(classes)}; one class per chain is fitted")
        n, rows = int(r["elements"]), rows_of(r["shape"])
        f = fit(chain["forward"], runs, n, rows, extra_f, float(r["fwd_s"]), stream, launch)
        b = fit(chain["backward"], runs, n, rows, extra_b, float(r["bwd_s"]), stream, launch)
        if f is None or b is None:
            continue
        cls = classes.pop()
        fits.setdefault(cls, ([], []))
        fits[cls][0].append(f)
        fits[cls][1].append(b)
    lines = [
        "# Written by bench/torch/fit_hf_modules.py: do not edit by hand, re-run the command.",
        f'command: "bench/torch/fit_hf_modules.py {a.modules_csv} {a.membound_csv} {a.profile_yaml} '
        f'--launch-us {a.launch_us:g} --out {a.out}"',
        f'source: "median relative efficiency over the streaming copy rate (mem_copy of {largest["bytes"]} B: '
        f'{stream / 1e9:.0f} GB/s, {a.membound_csv}) at which the kernel chains of {a.profile_yaml} (each kernel '
        f'at least the {a.launch_us:g} us launch floor) add up to the module times of {a.modules_csv} (rows of '
        f'at least {a.min_elements} elements)"',
        "relative_to_streaming:",
    ]
    for cls in sorted(fits):
        fw, bw = fits[cls]
        lines.append(f"  {cls}: {{forward: {statistics.median(fw):.3f}, backward: {statistics.median(bw):.3f}}}"
                     f"  # {len(fw)} rows; forward {min(fw):.3f}..{max(fw):.3f}, backward {min(bw):.3f}..{max(bw):.3f}")
    with open(a.out, "w") as out:
        out.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
