#!/usr/bin/env bash
# FT-L's norm_constraint on Gemma 3 270M, dev split only: the SmolLM2-chosen 1e-2 wrecks Gemma's neighbours and loss
# (test sample: NS 7.4, loss drift +38.9%), so the constraint is chosen again on 30 Gemma dev records, layer 5
# (ROME's), with the loss drift measured. One thread; one JSON per value in this folder.
#   bash studies/ft_norm_gemma/run.sh [values...]
set -euo pipefail
cd "$(dirname "$0")/../.."
for c in "${@:-1e-3 2e-3 5e-3 1e-2}"; do
  for v in $c; do
    OMP_NUM_THREADS=1 .venv/bin/python -m interp.cli eval-edits --model gemma3-270m --split dev --sample 30 \
      --sample-seed 0 --editor ft --baseline none --hparam norm_constraint=$v --no-generation --no-lens --json \
      > "studies/ft_norm_gemma/dev_$v.json"
  done
done
