#!/usr/bin/env python3
"""README stays true (issue 34): every offsim command README.md shows that runs in a few seconds
runs and exits 0, and every figure its comment quotes (a number with ms, s, GiB or TFLOPS) is what
it prints, at the precision quoted ("869 ms" matches 868.997 ms). A what-if's "from" figure is the
demo run's (README's first command). Commands too slow for the unit suite are named in SLOW with
their reason and only checked to be listed.

Usage: readme_test.py OFFSIM_BINARY SOURCE_DIR"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Commands (by a string they contain) left out of the unit suite, and why.
SLOW = {
    "offsim search": "simulates dozens of strategies, 5 s (docs/search.md; the cli test runs a small search)",
    "offsim validate": "every validation case (its own test: validation)",
    "offsim check": "every regression case (its own test: regression)",
    "offsim diff": "needs two earlier runs' folders (the cli test runs diff)",
}
FIGURE = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)\s*(ms|s|GiB|TFLOPS)\b")


def commands(readme):
    """(command, comment) for each ./build/offsim line of README's sh blocks, continuations joined."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", readme, re.S):
        lines = block.split("\n")
        i = 0
        while i < len(lines):
            line = lines[i]
            if not line.startswith("./build/offsim"):
                i += 1
                continue
            command, comment = [], []
            while True:
                code, _, note = line.partition(" #")
                code = code.rstrip()
                if note:
                    comment.append(note.strip())
                more = code.endswith("\\")
                command.append(code.rstrip("\\").strip())
                i += 1
                if i < len(lines) and lines[i].startswith("    #"):  # a comment continued
                    comment.append(lines[i].strip().lstrip("#").strip())
                    i += 1
                if not more or i >= len(lines):
                    break
                line = lines[i]
            out.append((" ".join(command), " ".join(comment)))
    return out


# The report's lines that print a unit before the number ("TFLOPS per device    104.0 ...").
UNIT_FIRST = re.compile(r"(TFLOPS) per device\s+(\d[\d,]*(?:\.\d+)?)")


def numbers(text):
    """(value, unit) of every figure in text."""
    return [(float(v.replace(",", "")), u) for v, u in FIGURE.findall(text)] + [
        (float(v.replace(",", "")), u) for u, v in UNIT_FIRST.findall(text)]


def quoted_matches(quoted, unit, printed):
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    q = float(quoted.replace(",", ""))
    return any(u == unit and abs(round(v, decimals) - q) < 10 ** -decimals / 2 for v, u in printed)


def main():
    offsim, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    readme = open(os.path.join(source, "README.md")).read()
    work = tempfile.mkdtemp(prefix="offsim-readme-")
    for d in ("configs", "tests", "bench"):
        os.symlink(os.path.join(source, d), os.path.join(work, d))
    failed = passed = 0
    demo_output = ""
    try:
        for command, comment in commands(readme):
            slow = next((why for key, why in SLOW.items() if key in command.replace("./build/offsim", "offsim")), None)
            if slow:
                print(f"skipped ({slow}): {command}")
                continue
            run = subprocess.run(command.replace("./build/offsim", offsim), shell=True, cwd=work,
                                 capture_output=True, text=True, timeout=120)
            if run.returncode != 0:
                print(f"FAIL: exit {run.returncode}: {command}\n{run.stderr[-2000:]}")
                failed += 1
                continue
            passed += 1
            if not demo_output:
                demo_output = run.stdout
            printed = numbers(run.stdout) + numbers(demo_output)
            for value, unit in FIGURE.findall(comment):
                if quoted_matches(value, unit, printed):
                    passed += 1
                else:
                    print(f"FAIL: README quotes {value} {unit} for `{command}`; it prints:\n{run.stdout[:1500]}")
                    failed += 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"readme: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
