#!/usr/bin/env bash
# Issue 47: why an update inside a training job is slower than the bench's median at the same shapes. On the sixth
# lease (H200) the reference run's jobs took 1.5-4.6 times the bench's seconds per update (BENCHMARKS.md, "Process
# starts"). This times, at the GPU reference's shapes (preset reference_gpu, vocabulary 8,000, 256 x 128, bf16):
#   loader      `bench loader --launches 5000`: 5,000 small kernel launches as an update's host side, with the
#               micro-batches built on demand, on a thread and in a process (this machine's CPU, real CUDA launches,
#               pinned copies); its JSON also to $OUT/loader.json
#   bench       `bench one-stage step1` and `step2-bl_base` (synthetic batches; median of 10 after 3 warm-up)
#   job         run_pretrain.py for STEPS updates, then run_adapt.py (BL_BASE's Step 2 over it, English as the
#               "target": the same shapes), each job's own update_seconds / STEPS (summary.json); micro-batches
#               built 2 ahead in a process of their own (a GPU's default since 2026-12-04; on a thread in the
#               seventh lease's rows)
#   prefetch 0  the same jobs with batches built on demand (no background builder, no pinned copies)
#   unchecked   the same jobs without DeepSpeed's bf16 gradient overflow check
#   blocks      the same jobs over full blocks (--packing blocks): no padding, so no (B, H, S, S) ALiBi mask
#   profiled    the same jobs with --profile-updates 10: updates 11-20 under torch.profiler, their time by kernel
#               class in the row ("profile"), torch's table of the largest kernels in gap.log
#   thread      the same jobs with their micro-batches built on a thread (--prefetch-process False), which takes
#               turns of the interpreter's lock from the loop launching the kernels: the seventh lease's job row
# ROWS picks a subset, in that order (default: the first lease's four, bench to unchecked), e.g. ROWS=blocks;
# ROWS=none prepares the data.
# Each row's figures go to $OUT/gap.jsonl, the whole output to $OUT/gap.log. For a lease (about 5 minutes; after `gpu_run.sh --minutes 6` in the same lease):
#     device run: bash scripts/experiments/gpu_update_gap.sh      carry [".gpu"]   (after scripts/gpu_prepare.py)
# On a CPU at a size of seconds: PRESET=tiny MICRO=4 STEPS=6 PYTHON=.venv/bin/python bash scripts/experiments/gpu_update_gap.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/gpu_update_gap}; mkdir -p "$OUT"
source scripts/gpu_env.sh
WORK=${WORK:-/tmp/ds_minimodel_gap}; rm -rf "$WORK"; mkdir -p "$WORK"
PRESET=${PRESET:-reference_gpu} VOCAB=${VOCAB:-8000} MICRO=${MICRO:-256} STEPS=${STEPS:-200}
ROWS=,${ROWS:-bench,job,prefetch0,unchecked},
wanted() { [[ $ROWS == *",$1,"* ]]; }
log() { tee -a "$OUT/gap.log"; }
"$PY" - "$WORK" "$MICRO" <<'PY'
import json, lzma, sys
from pathlib import Path
from types import SimpleNamespace
import torch
from ds_minimodel.tools.gpu_common import ds_config
work, micro = Path(sys.argv[1]), int(sys.argv[2])
text = lzma.decompress(Path("reference_data/corpus/en.txt.xz").read_bytes()).decode("utf-8")
(work / "en.txt").write_text("".join(text.splitlines(keepends=True)[:40000]), encoding="utf-8")
# The reference's DeepSpeed JSON on one rank, FusedAdam on a GPU (tools.gpu_common.ds_config), and without the check.
run = SimpleNamespace(work=work, cuda=torch.cuda.is_available())
ds_config(run, "unchecked", base="ds_configs/gpu_bf16_reference.json", batch=micro, overflow_check=False)
checked = ds_config(run, "checked", base="ds_configs/gpu_bf16_reference.json", batch=micro)
if not run.cuda:  # bf16 matmuls crawl on a CPU without native bf16: the check is of the plumbing
    config = json.loads(checked.read_text())
    config.pop("bf16")
    checked.write_text(json.dumps(config))
PY
"$PY" -m ds_minimodel prepare --corpus "$WORK/en.txt" --out "$WORK/en" --vocab-size "$VOCAB" --no-progress 2>&1 | log
wanted loader && { echo "### loader" | log
timeout 120 "$PY" -m ds_minimodel bench loader --data "$WORK/en" --seq-len 128 --micro-batch "$MICRO" --launches 5000 \
  --updates 50 --json "$OUT/loader.json" 2>&1 | log
[ -f "$OUT/loader.json" ] && "$PY" -c "import json, sys; r = json.load(open(sys.argv[1])); \
[print(json.dumps({'row': 'loader', 'stage': x['builder'], 's_per_update': x['update_ms'] / 1e3, **x})) \
 for x in r['runs']]" "$OUT/loader.json" >> "$OUT/gap.jsonl"; }
wanted bench && { echo "### bench" | log
timeout 200 "$PY" -m ds_minimodel bench one-stage step1,step2-bl_base --preset "$PRESET" --vocab "$VOCAB" --seq-len 128 \
  --micro-batch "$MICRO" --warmup 3 --updates 10 --ds-config "$WORK/ds_checked.json" 2>&1 | log \
  | grep '^{' | "$PY" -c "import json,sys; [print(json.dumps({'row': 'bench', **json.loads(l)})) for l in sys.stdin]" \
  >> "$OUT/gap.jsonl"; }
job() {  # row name, DeepSpeed JSON, extra arguments
  local row=$1 ds=$2; shift 2
  wanted "$row" || return 0
  echo "### $row" | log
  local common=(--ds-config "$ds" --steps "$STEPS" --save-every "$STEPS" --log-every "$STEPS" --seq-len 128 "$@")
  timeout 200 "$PY" run_pretrain.py --variant base --preset "$PRESET" --data "$WORK/en" --out "$WORK/$row/step1" \
    "${common[@]}" 2>&1 | log
  timeout 200 "$PY" run_adapt.py --system bl_base --body "$WORK/$row/step1/checkpoints/step_$(printf %08d "$STEPS")" \
    --data "$WORK/en" --out "$WORK/$row/step2" "${common[@]}" 2>&1 | log
  "$PY" - "$row" "$WORK/$row" "$STEPS" >> "$OUT/gap.jsonl" <<'PY'
import json, sys
from pathlib import Path
row, folder, steps = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
for stage in ("step1", "step2"):
    summary = folder / stage / "summary.json"
    seconds = json.loads(summary.read_text())["update_seconds"] if summary.is_file() else None
    profile = folder / stage / "profile.json"
    print(json.dumps({"row": row, "stage": stage, "updates": steps, "update_seconds": seconds,
                      "s_per_update": seconds / steps if seconds else None,
                      **({"profile": json.loads(profile.read_text())} if profile.is_file() else {})}))
PY
  for stage in step1 step2; do
    local table=$WORK/$row/$stage/profile.txt
    [ -f "$table" ] && { echo "### $row $stage: profile.txt"; cat "$table"; } | log
  done
}
job job "$WORK/ds_checked.json"
job prefetch0 "$WORK/ds_checked.json" --prefetch 0
[ "$("$PY" -c 'import torch; print(torch.cuda.is_available())')" = True ] && job unchecked "$WORK/ds_unchecked.json"
job blocks "$WORK/ds_checked.json" --packing blocks
job profiled "$WORK/ds_checked.json" --profile-updates 10
job thread "$WORK/ds_checked.json" --prefetch-process False
[ -f "$OUT/gap.jsonl" ] || exit 0  # ROWS=none
"$PY" -c "
import json
for l in open('$OUT/gap.jsonl'):
    r = json.loads(l); p = r.get('profile')
    print(r['row'], r['stage'], r.get('median_s') or r.get('s_per_update'), *([
        'profiled %.4f s/update:' % p['seconds_per_update'],
        ', '.join('%s %.0f%%' % (k, 100 * v) for k, v in sorted(p['shares'].items(), key=lambda kv: -kv[1]))]
        if p else []))" | log
