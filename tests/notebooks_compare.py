#!/usr/bin/python3
"""Checks that the committed notebooks carry the outputs their code gives today.

The notebooks are committed with their rendered outputs (tables, printed figures and plots) so a
reader on a forge sees them without running anything. This compares every code cell's text outputs
(stdout and text/plain results) in the committed notebook with those of the same notebook just
executed headless; plots (image/png) must be present where the executed run has one, but are not
compared byte for byte (a font or library update redraws them). A difference means the model's
figures moved: `./run notebooks` re-renders the committed copies.

usage: notebooks_compare.py COMMITTED.ipynb EXECUTED.ipynb
"""
import json
import sys


def cell_outputs(cell):
    """The comparable outputs of one code cell: (kind, text) pairs, in order."""
    found = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            found.append((out["name"], "".join(out["text"])))
        elif out["output_type"] in ("execute_result", "display_data"):
            data = out["data"]
            if "image/png" in data:
                found.append(("image/png", "a plot"))
            elif "text/plain" in data:
                found.append(("text/plain", "".join(data["text/plain"])))
        elif out["output_type"] == "error":
            found.append(("error", out.get("ename", "")))
    return found


def main(committed_path, executed_path):
    committed = json.load(open(committed_path))
    executed = json.load(open(executed_path))
    code = [(c, e) for c, e in zip(committed["cells"], executed["cells"]) if c["cell_type"] == "code"]
    problems = []
    for index, (mine, fresh) in enumerate(code, start=1):
        if not mine.get("outputs") and fresh.get("outputs"):
            problems.append(f"code cell {index}: committed without its outputs")
        elif cell_outputs(mine) != cell_outputs(fresh):
            problems.append(f"code cell {index}: committed outputs differ from what it prints today")
    for problem in problems:
        print(f"{committed_path}: {problem}", file=sys.stderr)
    if problems:
        print("re-render the committed notebooks with: ./run notebooks", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
