#!/usr/bin/env bash
# Step-1 levers for the reference experiment (RESULTS.md, "Choosing the settings"): pretrain the reference body with
# one setting changed at a time, on the reference English data, for the same number of tokens, and print the MLM
# loss each reaches (mean of the last LAST logged updates) next to the data's unigram entropy.
#
#   TOKENS=6000000 bash scripts/experiments/reference_step1_levers.sh dropout0-batch32 ...
#
# Variants (name: what differs from configs/reference.json's Step 1):
#   reference          nothing (the config's own Step 1: pre-LN, dropout 0.1, 64 x 128 tokens, peak lr 1e-3)
#   dropout0           no dropout in the body (pretraining is far from over-fitting at these budgets)
#   dropout0-batch32   no dropout, 32 sequences per update (twice the updates for the same tokens)
#   dropout0-batch32-lr2e-3   the same at twice the peak learning rate
#   dropout0-batch32-sinusoidal   no dropout, 32 sequences, the position table initialised sinusoidal
#   dropout0-batch32-sinusoidal-lr2e-3   the same at twice the peak learning rate
#   dropout0-batch32-alibi   no dropout, 32 sequences, symmetric ALiBi attention bias ("attention_bias": "alibi")
#   postln             post-LN (the paper's placement), peak lr 5e-4
# STEPS overrides the number of updates TOKENS gives; SAVE_EVERY saves more often than only at the end (for the probe).
# Each runs on 2 ranks through the deepspeed launcher, into runs/reference-levers/<name>; finished ones are reused.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH" DS_ACCELERATOR=cpu OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch_extensions}
TOKENS=${TOKENS:-6000000} LAST=${LAST:-4}
ROOT=runs/reference-levers
DATA=runs/reference/data/en  # prepared by: python -m ds_minimodel pipeline --config configs/reference.json --only prepare
mkdir -p "$ROOT"
for name in "$@"; do
  dir=$ROOT/$name
  overrides=$ROOT/$name.model.json ds=$ROOT/$name.ds.json
  python - "$name" "$overrides" "$ds" <<'PY'
import json, sys
name, overrides, ds = sys.argv[1:]
model = {"reference": {}, "dropout0": {"dropout": 0.0, "attention_dropout": 0.0},
         "dropout0-batch32": {"dropout": 0.0, "attention_dropout": 0.0},
         "dropout0-batch32-lr2e-3": {"dropout": 0.0, "attention_dropout": 0.0},
         "dropout0-batch32-sinusoidal": {"dropout": 0.0, "attention_dropout": 0.0, "position_init": "sinusoidal"},
         "dropout0-batch32-sinusoidal-lr2e-3": {"dropout": 0.0, "attention_dropout": 0.0,
                                                "position_init": "sinusoidal"},
         "dropout0-batch32-alibi": {"dropout": 0.0, "attention_dropout": 0.0, "attention_bias": "alibi"},
         "postln": {"pre_norm": False}}[name]
config = json.load(open("ds_configs/cpu_bf16_reference.json"))
if name.startswith("dropout0-batch32"):
    config.update(train_batch_size=32, train_micro_batch_size_per_gpu=16)
if name.endswith("-lr2e-3"):
    config["optimizer"]["params"]["lr"] = config["scheduler"]["params"]["warmup_max_lr"] = 2e-3
if name == "postln":
    config["optimizer"]["params"]["lr"] = config["scheduler"]["params"]["warmup_max_lr"] = 5e-4
json.dump(model, open(overrides, "w"))
json.dump(config, open(ds, "w"))
PY
  batch=$(python -c "import json; print(json.load(open('$ds'))['train_batch_size'])")
  steps=$(( TOKENS / (batch * 108) ))
  [ -n "${STEPS:-}" ] && steps=$STEPS  # 108 real tokens per 128-token block on this data (pipeline log)
  [ -f "$dir/.finished" ] || {
    resume=(); [ -f "$dir/run.json" ] && resume=(--resume)
    deepspeed --num_gpus 2 run_pretrain.py --variant base --preset reference --model-config "$overrides" \
      --seq-len 128 --seed 1 --data "$DATA" --ds-config "$ds" --steps "$steps" --save-every "${SAVE_EVERY:-$steps}" \
      --log-every 25 --out "$dir" "${resume[@]}" > "$dir.log" 2>&1 && touch "$dir/.finished"
  }
done
python - "$ROOT" "$LAST" "$DATA" "$@" <<'PY'
import json, sys
import numpy as np
root, last, data, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
tokens = np.fromfile(f"{data}/tokens_00000.bin", dtype=np.uint16)
counts = np.bincount(tokens[tokens >= 5]).astype(float)
p = counts[counts > 0] / counts.sum()
print(f"unigram entropy of {data}: {-(p * np.log(p)).sum():.3f} nats")
# A left-bigram model fitted on the first 90% of the tokens, interpolated with the unigram (0.7 / 0.3), scored on the
# next 200,000 of the held-out 10%: what an MLM that reads its neighbours in order should beat.
ids = tokens.astype(np.int64)
cut = int(len(ids) * 0.9)
train, held = ids[:cut], ids[cut:cut + 200_001]
vocab = int(ids.max()) + 1
pair_counts = {}
for key, count in zip(*np.unique(train[:-1] * vocab + train[1:], return_counts=True)):
    pair_counts[int(key)] = int(count)
previous = np.bincount(train[:-1], minlength=vocab).astype(float)
unigram = np.bincount(train, minlength=vocab) + 0.1
unigram = unigram / unigram.sum()
nats = [-np.log(0.7 * pair_counts.get(int(x) * vocab + int(y), 0) / max(previous[x], 1) + 0.3 * unigram[y])
        for x, y in zip(held[:-1], held[1:]) if x >= 5 and y >= 5]
print(f"held-out interpolated left-bigram cross-entropy: {np.mean(nats):.3f} nats")
for name in names:
    rows = [json.loads(line) for line in open(f"{root}/{name}/metrics.jsonl")]
    tail = rows[-last:]
    print(f"{name:<18} {rows[-1]['step']:>5} updates, {rows[-1]['tokens'] / 1e6:5.2f}M tokens: "
          f"loss {np.mean([r['loss'] for r in tail]):.3f} (mean of the last {len(tail)} logs), "
          f"{np.mean([r['tokens_per_s'] for r in rows]):.0f} tokens/s")
PY
