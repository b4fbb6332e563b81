#!/usr/bin/env bash
# Does the Step-2 recipe chosen on the reference dev sets transfer at the demo's size? (issue 27: the demo uses it
# if so, and keeps saying it is too small if not.) The demo pipeline (configs/demo.json) three times, differing only
# in Step 2's initialiser: overlap (the paper's, the demo's own), FOCUS, and WECHSEL over the help-page lexicon.
# Each also scores the lohelp German dev set of reference_data/ (the demo ships no German dev set) with the demo's
# own classifiers: the choice is read there. The FOCUS and WECHSEL runs link the overlap run's data, Step 1, Step 1b
# and Step 3, so they train Step 2 only. Arguments go to every pipeline run.
set -euo pipefail
cd "$(dirname "$0")/.."
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
    mkdir -p "$OUT/$init"
    for step in data step1 step1b step3; do
      [ -e "$OUT/$init/$step" ] || ln -s "../overlap/$step" "$OUT/$init/$step"
    done
  fi
  python -m ds_minimodel pipeline --config "$OUT/$init.json" "$@"
done
