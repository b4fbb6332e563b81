#!/bin/bash
# Step 2 again between two of the fine run's saves, saved every 25 updates: each LANG:SYSTEM:FROM resumes FINE's run
# of SYSTEM in LANG from its save at update FROM, in FINER, and is stopped (SIGTERM: it saves where it is, exit 143
# under torchrun's 1) once its save at FROM + 100 is complete. Run from the worktree that trained FINE:
#   bash results/relearn-long/fine/finer/run.sh runs/relearn-fine runs/finer de:bl_base:200 de:minipost:200 ...
set -u
fine=$1 finer=$2; shift 2
export PATH=/work/main/.venv/bin:$PATH
echo "== start $(date -u +%FT%T) $(git rev-parse --short HEAD)"
for job in "$@"; do
  IFS=: read -r lang system from <<< "$job"
  src=$fine/step2/$lang/$system dst=$finer/step2/$lang/$system
  start=$(printf step_%08d "$from") stop=$(printf step_%08d $((from + 100)))
  mkdir -p "$dst/checkpoints" "$finer/specs"
  cp -r "$src/checkpoints/$start" "$src"/checkpoints/zero_to_*.py "$dst/checkpoints/"
  printf %s "$start" > "$dst/checkpoints/latest"
  cp "$src/run.json" "$dst/"
  python3 -c "import json, sys; \
      rows = [l for l in open(sys.argv[1]) if json.loads(l).get('step', 0) <= int(sys.argv[3])]; \
      open(sys.argv[2], 'w').writelines(rows)" "$src/metrics.jsonl" "$dst/metrics.jsonl" "$from"
  spec=$finer/specs/step2-$lang-$system.json
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); \
      d.update(out=sys.argv[3], save_every=25, resume=True, log_root=sys.argv[4]); \
      json.dump(d, open(sys.argv[2], 'w'), indent=2)" \
      "$fine/specs/step2-$lang-$system.json" "$spec" "$dst" "$finer/tensorboard"
  python -m torch.distributed.run --nproc_per_node 2 --master_port 29611 run_adapt.py --config "$spec" \
      > "$finer/step2-$lang-$system.log" 2>&1 &
  pid=$!
  until [ "$(cat "$dst/checkpoints/latest" 2>/dev/null)" = "$stop" ] || ! kill -0 $pid 2>/dev/null; do sleep 2; done
  kill -TERM $pid; wait $pid
  echo "== $lang $system rc=$? $(date -u +%FT%T) latest=$(cat "$dst/checkpoints/latest")"
done
echo "== done $(date -u +%FT%T)"
