"""What the PyTorch benchmarks share: CUDA-event timing and an atomic CSV write."""
import csv
import os


def timed(fn, reps=20, warm=5):
    """Mean seconds per call of fn: CUDA events around `reps` calls after `warm` warm-up calls."""
    import torch
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def write_csv(path, rows):
    """rows (dicts) into path through a temporary file; the columns are every key, first seen first."""
    fields = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    with open(path + ".tmp", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(rows)
    os.replace(path + ".tmp", path)
