#!/usr/bin/env bash
# Issue 46 item 4: why MiniJoint's WECHSEL rows transfer worse than BL_BASE's over the CPU-trained reference body
# (RESULTS.md, "The reference run with WECHSEL ... on test": German 47.3 against 55.2 at update 600, and already 38.0
# against 42.2 at update 0), measured on German dev, one finetuning seed; test is not read. Four pipelines from
# configs/reference_wechsel.json (WECHSEL over the help-page lexicons), each scoring the dev files in Step 4:
#
#   control      BL_BASE and MiniJoint as the reference run trained them (Step 1 3,000 updates each, second head
#                after layer 2, loss the mean of both heads; Step 2 600 updates): the gap reproduced on dev;
#   long-step2   MiniJoint's Step 2 for 1,540 updates over the control's mini-model (BL_BASE's 600 updates of Step-2
#                compute: a MiniJoint update costs 39% of BL_BASE's);
#   aux-weight   MiniJoint pretrained with the second head's loss weighed 0.25, the top head's 0.75 (step1.aux_weight);
#   aux-layer    MiniJoint pretrained with the second head after layer 3 of 6 (aux_layer; its mini-model 3 layers);
#   full-depth   the control's MiniJoint primary adapted as BL_BASE's is: Step 2 over all 6 layers and the top head
#                (a system of this experiment's own, scripts/experiments/minijoint_full_system.py, a plugin). With
#                the control it splits MiniJoint's gap into the jointly pretrained primary's part and the mini-model's.
#
# Then the label-free probe (ds-minimodel align) over the control's two primaries and each lever's MiniJoint: German
# dev sentences read with each Step-2 checkpoint's rows, matched to their English pairs read with the body's own
# rows, after every layer. It says where in the primary MiniJoint's rows (learned over layers 1-2 and the second
# head) stop aligning, which no classifier can: $OUT/<part>/align-<system>.jsonl.
#
#   bash scripts/experiments/minijoint_dev.sh            # resumes where it stopped; --list: the jobs, nothing run
#   python scripts/experiments/minijoint_table.py         # the table of what is finished (scores, speedups, probe)
#
# About 7.5 hours of this project's 2-core CPU (each Step 1 about 75 minutes at 4,400-4,700 tokens/s on two ranks, as
# the reference run's were); each part resumes when run again. The control's Step 1 repeats the reference run's
# (same config, seed and data): its logged losses can be compared with results/reference-focus/step1-*/metrics.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/minijoint-dev} PY=${PYTHON:-.venv/bin/python}
export DS_ACCELERATOR=${DS_ACCELERATOR:-cpu} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch_extensions} PATH="$PWD/.venv/bin:$PATH"
export DS_MINIMODEL_PLUGINS=minijoint_full_system PYTHONPATH="$PWD/scripts/experiments${PYTHONPATH:+:$PYTHONPATH}"
[ -f reference_data/lexicons/de-en.help.tsv ] && [ -f reference_data/corpus/de.txt ] || {
  echo "minijoint_dev.sh: reference_data is not unpacked: python scripts/unpack_reference_data.py" >&2; exit 2; }
mkdir -p "$OUT"
"$PY" - "$OUT" <<'EOF'
import json
import sys

out = sys.argv[1]
base = json.load(open("configs/reference_wechsel.json", encoding="utf-8"))
base["targets"] = [t for t in base["targets"] if t["lang"] == "de"]
for task in base["tasks"]:
    task["dev"] = {lang: path for lang, path in task["dev"].items() if lang in ("en", "de")}
    task["test"] = dict(task["dev"])  # Step 4 scores the dev files
base["step3"]["seeds"] = [1]
configs = {
    "control": {**base, "systems": ["bl_base", "minijoint"]},
    "long-step2": {**base, "systems": ["minijoint"], "step2": {**base["step2"], "steps": 1540, "save_every": 220}},
    "aux-weight": {**base, "systems": ["minijoint"], "step1": {**base["step1"], "aux_weight": 0.25}},
    "aux-layer": {**base, "systems": ["minijoint"], "aux_layer": 3},
    "full-depth": {**base, "systems": ["minijoint_full"]},
}
for name, config in configs.items():
    with open(f"{out}/{name}.json", "w", encoding="utf-8") as f:
        json.dump({**config, "out": f"{out}/{name}"}, f, indent=2)
EOF
"$PY" -m ds_minimodel pipeline --config "$OUT/control.json" "$@"
for lever in long-step2 aux-weight aux-layer full-depth; do  # the control's data; long-step2 and full-depth also
  "$PY" -m ds_minimodel.pipeline.ownership "$OUT/$lever" "$OUT/$lever.json"  # its MiniJoint Steps 1 and 3
  links=(data)
  case $lever in long-step2|full-depth) links+=(step1 step3) ;; esac
  for step in "${links[@]}"; do
    [ -e "$OUT/$lever/$step" ] || [ ! -e "$OUT/control/$step" ] || ln -s "$(realpath "$OUT/control/$step")" \
                                                                             "$OUT/$lever/$step"
  done
  "$PY" -m ds_minimodel pipeline --config "$OUT/$lever.json" "$@"
done
[ "${1:-}" = --list ] && exit 0
for probe in control:bl_base control:minijoint long-step2:minijoint aux-weight:minijoint aux-layer:minijoint \
             full-depth:minijoint_full; do
  part=${probe%%:*} system=${probe##*:}
  P=$OUT/$part primary=$([ "$system" = bl_base ] && echo base || echo minijoint)
  [ -s "$P/align-$system.jsonl" ] && continue  # probed already
  "$PY" -m ds_minimodel align --model "$(ls -d "$P/step1/$primary/checkpoints/step_"* | tail -1)" \
      --source reference_data/tasks/lohelp/dev.en.jsonl --target reference_data/tasks/lohelp/dev.de.jsonl \
      --embeddings "$P/step2/de/$system/checkpoints/step_"* > "$P/align-$system.jsonl.part"
  mv "$P/align-$system.jsonl.part" "$P/align-$system.jsonl"
done
