#!/usr/bin/env bash
# What a 2-rank launch costs on this machine through each local launcher: wall clock and CPU (user + system, every
# process of the launch) of one tiny Step-1 run of 2 updates (a two-layer tiny model, fp32, on the demo's English
# text), REPEATS times each, launchers in turn. Most of it is starting: Python, torch, torch._dynamo (torch's
# optimizers import it at their first step), DeepSpeed and the process group, once per process.
#
#   bash scripts/experiments/launcher_cost.sh [OUT]        # default OUT: runs/launcher-cost; REPEATS=2
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-runs/launcher-cost} REPEATS=${REPEATS:-2} PY=${PYTHON:-.venv/bin/python}
export DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 PATH="$PWD/.venv/bin:$PATH"
mkdir -p "$OUT"
[ -f "$OUT/en/meta.json" ] || "$PY" -m ds_minimodel prepare --corpus demo_data/corpus/en.txt --out "$OUT/en" \
  --vocab-size 2000 --no-progress >/dev/null
for rep in $(seq "$REPEATS"); do
  for launcher in deepspeed torchrun fork; do
    run="$OUT/$launcher-$rep"
    rm -rf "$run"
    cmd=$("$PY" -c "import shlex, sys
from ds_minimodel.cluster.launch import free_port, local_command
print(shlex.join(local_command(sys.argv[1], 2, free_port(), 'run_pretrain.py', sys.argv[2:])))" "$launcher" \
      --variant base --preset tiny --model-config tests/fixtures/two_layers.json --seq-len 64 \
      --ds-config ds_configs/cpu_fp32.json --data "$OUT/en" --out "$run" --steps 2 --log-every 1 --save-every 100)
    /usr/bin/time -f "$launcher (repeat $rep): %e s wall, %U s user + %S s system CPU" -o "$run.time" \
      bash -c "$cmd" > "$run.log" 2>&1 || { echo "$launcher failed: $run.log" >&2; exit 1; }
    cat "$run.time"
  done
done
