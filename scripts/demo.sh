#!/usr/bin/env bash
# Install into .venv and run the main job on the bundled demo data, on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export PATH="$PWD/.venv/bin:$PATH" DS_ACCELERATOR=${DS_ACCELERATOR:-cpu}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch_extensions}
# One BLAS thread per rank: two ranks with two threads each on a 2-core machine run several times slower.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
OUT=${OUT:-runs/demo}
# Step 0: English SentencePiece model and token shards (a no-op when already prepared).
python -m ds_minimodel.prepare --corpus demo_data/corpus/en.txt --out "$OUT/data/en" --vocab-size 8000
# Step 1: MiniJoint pretraining (12 layers, second head after layer 4) on 2 CPU ranks.
RESUME=""
[ -f "$OUT/pretrain-minijoint/run.json" ] && RESUME="--resume"
deepspeed --num_gpus 2 run_pretrain.py --variant minijoint --preset tiny --seq-len 128 \
  --ds-config ds_configs/cpu_fp32.json --data "$OUT/data/en" --out "$OUT/pretrain-minijoint" \
  --steps 200 --save-every 100 --log-every 20 $RESUME
echo "TensorBoard logs: tensorboard --logdir $OUT"
