#!/usr/bin/env bash
# Executes every notebook headless (Debian's jupyter-nbconvert); any failing cell fails the test.
# Then checks the committed copy carries the outputs the notebook gives today
# (notebooks_compare.py; `./run notebooks` re-renders them).
# usage: notebooks_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
export OFFSIM_NOTEBOOK_OUT="$build/notebooks"
mkdir -p "$build/notebooks-executed"
cd "$src/notebooks"
for nb in *.ipynb; do
  jupyter-nbconvert --to notebook --execute --ExecutePreprocessor.timeout=600 \
    --output-dir "$build/notebooks-executed" "$nb" >"$build/notebooks-executed/${nb%.ipynb}.log" 2>&1 ||
    { cat "$build/notebooks-executed/${nb%.ipynb}.log"; exit 1; }
  /usr/bin/python3 "$src/tests/notebooks_compare.py" "$nb" "$build/notebooks-executed/$nb"
  echo "notebook ok: $nb"
done
