#!/usr/bin/env bash
# Does the Step-2 recipe chosen on the reference dev sets transfer at the demo's size? (issue 27: the demo uses it
# if so, and keeps saying it is too small if not.) The demo pipeline (configs/demo.json) three times, differing only
# in Step 2's initialiser: overlap (the paper's, the demo's own), FOCUS, and WECHSEL over the help-page lexicon.
# Each also scores the lohelp German dev set of reference_data/ (the demo ships no German dev set) with the demo's
# own classifiers: the choice is read there (the pipeline's Step 4 scores test files only). The FOCUS and WECHSEL
# runs link the overlap run's data, Step 1, Step 1b and Step 3, so they train Step 2 only. Output: the three runs,
# $OUT/dev_scores.jsonl (every classifier seed, system and Step-2 checkpoint on German dev) and the table this prints.
# Arguments go to every pipeline run.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup_env.sh
export PATH="$PWD/.venv/bin:$PATH" DS_ACCELERATOR=${DS_ACCELERATOR:-cpu} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch_extensions}
python scripts/unpack_reference_data.py
OUT=${OUT:-runs/demo-dev-inits}
mkdir -p "$OUT"
for init in overlap focus wechsel; do
  python - "$init" "$OUT" <<'EOF'
import json
import sys

init, out = sys.argv[1:]
config = json.load(open("configs/demo.json", encoding="utf-8"))
config["out"] = f"{out}/{init}"
config["step2"]["init"] = init
config["tasks"][0]["dev"]["de"] = "reference_data/tasks/lohelp/dev.de.jsonl"
if init == "wechsel":
    config["targets"][0]["word_list"] = "reference_data/lexicons/de-en.help.tsv"
with open(f"{out}/{init}.json", "w", encoding="utf-8") as f:
    json.dump(config, f, indent=2)
EOF
  if [ "$init" != overlap ]; then
    python -m ds_minimodel.pipeline.ownership "$OUT/$init" "$OUT/$init.json"  # claimed as the pipeline claims it
    for step in data step1 step1b step3; do
      [ -e "$OUT/$init/$step" ] || ln -s "../overlap/$step" "$OUT/$init/$step"
    done
  fi
  python -m ds_minimodel pipeline --config "$OUT/$init.json" "$@"
done
T=reference_data/tasks/lohelp
: > "$OUT/dev_scores.jsonl"
for init in overlap focus wechsel; do
  for pair in bl_base:base bl_small:small minijoint:minijoint minipost:base; do  # system: the primary it reads with
    system=${pair%%:*} primary=${pair#*:}
    for classifier in "$OUT/$init/step3/lohelp/$primary"/seed*; do
      python -m ds_minimodel evaluate --task-model "$(ls -d "$classifier"/checkpoints/step_* | tail -1)" \
        --embeddings "$OUT/$init/step2/de/$system"/checkpoints/step_* --test $T/dev.de.jsonl --lang de \
        | INIT=$init SYSTEM=$system python -c "import json, os, sys
for line in filter(str.strip, sys.stdin):
    print(json.dumps({**json.loads(line), 'init': os.environ['INIT'], 'system': os.environ['SYSTEM']}))" \
        >> "$OUT/dev_scores.jsonl"
    done
  done
done
python - "$OUT" <<'EOF'
import collections
import json
import statistics
import sys

out = sys.argv[1]
rows = [json.loads(line) for line in open(f"{out}/dev_scores.jsonl", encoding="utf-8")]
base = next(b for b in json.load(open(f"{out}/overlap/results.json"))["baselines"] if b["file"].endswith("dev.de.jsonl"))
scores = collections.defaultdict(list)
for r in rows:
    scores[(r["init"], r["system"])].append((r["step2_update"], r["accuracy"], r["macro_f1"]))
print(f"German dev (lohelp), mean over the demo's classifier seeds, accuracy (macro-F1) at each Step-2 update; "
      f"majority class {base['majority']:.1f}, bag of words {base['bag_of_words']:.1f}")
for (init, system), found in scores.items():
    at = collections.defaultdict(list)
    for update, accuracy, f1 in found:
        at[update].append((accuracy, f1))
    print(f"{init:8} {system:9} " + " | ".join(
        f"{u}: {statistics.mean(a for a, _ in v):.1f} ({statistics.mean(f for _, f in v):.1f})"
        for u, v in sorted(at.items())))
EOF
