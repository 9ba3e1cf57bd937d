#!/bin/sh
# The shipped residual table (configs/calibration/validation-residuals.csv, compiled into offsim for
# the 80% prediction intervals) is exactly what `offsim validate --residuals` writes from the
# shipped validation set: never tuned by hand. After a change that moves validation rows,
# regenerate it with the command below and rebuild.
set -eu
offsim=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# (the bounds are the validation test's; this test compares the table only)
"$offsim" validate --residuals "$tmp/residuals.csv" "$src/configs/validation" > /dev/null || true
if ! cmp -s "$tmp/residuals.csv" "$src/configs/calibration/validation-residuals.csv"; then
  diff "$src/configs/calibration/validation-residuals.csv" "$tmp/residuals.csv" | head -20 || true
  echo "configs/calibration/validation-residuals.csv is not what the validation set gives: regenerate it with"
  echo "  offsim validate --residuals configs/calibration/validation-residuals.csv   (then rebuild)"
  exit 1
fi
echo "validation-residuals.csv matches the validation set"
