#!/usr/bin/env bash
# Active forgetting against none, at equal budgets (issue 27): two Step-1 bodies of the CPU reference's shape (the
# `reference` preset, ds_configs/cpu_bf16_reference.json's recipe) trained side by side on one GPU from the same
# seed and data, one with --forget-every K. Each comes back as a model folder holding its tokenizer, in a tar split
# into 15 MiB parts ($OUT/bodies.tar.part-*; `cat bodies.tar.part-* | tar x`), for Steps 2-4 on a CPU
# (scripts/experiments/init_ladder.sh with BODY=<folder>).
#
#   bash scripts/experiments/gpu_forgetting.sh                 # the lent GPU machine: carry .gpu and runs/gpu_body_data/en
#   STEPS=4 K=2 bash scripts/experiments/gpu_forgetting.sh     # the same at a size of seconds, on a CPU
#
# DATA is English prepared with the tokenizer the bodies should have (default: the reference corpus with the GPU
# body's tokenizer, `ds-minimodel prepare --corpus reference_data/corpus/en.txt --out runs/gpu_body_data/en
# --tokenizer <body>/spm.model`).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/gpu_forgetting} DATA=${DATA:-runs/gpu_body_data/en} STEPS=${STEPS:-1000} K=${K:-400}
WORK=${WORK:-/tmp/ds_minimodel_forgetting}
source scripts/gpu_env.sh  # the GPU machine: no package registry
mkdir -p "$OUT"
rm -rf "$WORK" && mkdir -p "$WORK"
for variant in plain forget; do
  extra=(); [ "$variant" = forget ] && extra=(--forget-every "$K")
  # TRAIN_LIMIT (seconds): a run still going then gets SIGTERM, saves its update and stops (its step is printed)
  ${TRAIN_LIMIT:+timeout -s TERM "$TRAIN_LIMIT"} "$PY" run_pretrain.py --variant base --preset reference --seq-len 128 --seed 1 --data "$DATA" \
    --ds-config ds_configs/cpu_bf16_reference.json --steps "$STEPS" --save-every "$STEPS" \
    --log-every $(( STEPS / 20 > 0 ? STEPS / 20 : 1 )) --out "$WORK/$variant" "${extra[@]}" > "$OUT/$variant.log" 2>&1 &
done
wait || true
"$PY" - "$WORK" "$DATA" <<'PY'
import shutil, sys
from pathlib import Path
from ds_minimodel.train import checkpoint
work, data = Path(sys.argv[1]), Path(sys.argv[2])
for variant in ("plain", "forget"):
    folder = work / "bodies" / variant
    meta = checkpoint.checkpoint_as_model_folder(checkpoint.latest_checkpoint(work / variant), folder,
                                                 tokenizer=data / "spm.model")
    shutil.copy(work / variant / "metrics.jsonl", folder.parent / f"{variant}.metrics.jsonl")
    print(variant, "step", meta["step"], "weights", meta["weights_sha256"][:12])
PY
tar cf - -C "$WORK" bodies | split -b 15M - "$OUT/bodies.tar.part-"
ls -l "$OUT"
