#!/bin/bash
# Step 2 in LANG (default de) for BL_BASE and MiniPost with Step-2 seed SEED (default 2; the fine run's are seed 1),
# saved every 25 updates: BL_BASE for its whole 1,800 updates (its final score sets the target), MiniPost until its
# save at UNTIL (SIGTERM then: it saves where it is). Same body, Step 1b, data and schedule as FINE's runs (their
# specs, with seed, out and save_every changed). Run from the worktree that trained FINE:
#   bash results/relearn-long/fine/seed2/run.sh runs/relearn-fine runs/seed2 500 [SEED [LANG]]
set -u
fine=$1 out=$2 until=$3 seed=${4:-2} lang=${5:-de}
export PATH=/work/main/.venv/bin:$PATH
echo "== start $(date -u +%FT%T) $(git rev-parse --short HEAD)"
mkdir -p "$out/specs"
for system in bl_base minipost; do
  dst=$out/step2/$lang/$system spec=$out/specs/step2-$lang-$system.json
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); \
      d.update(seed=int(sys.argv[5]), out=sys.argv[3], save_every=25, log_root=sys.argv[4], \
          run_name=d['run_name'] + '-seed' + sys.argv[5]); \
      json.dump(d, open(sys.argv[2], 'w'), indent=2)" \
      "$fine/specs/step2-$lang-$system.json" "$spec" "$dst" "$out/tensorboard" "$seed"
  python -m torch.distributed.run --nproc_per_node 2 --master_port 29615 run_adapt.py --config "$spec" \
      > "$out/step2-$lang-$system.log" 2>&1 &
  pid=$!
  if [ $system = minipost ]; then
    stop=$(printf step_%08d "$until")
    until [ "$(cat "$dst/checkpoints/latest" 2>/dev/null)" = "$stop" ] || ! kill -0 $pid 2>/dev/null; do sleep 2; done
    kill -TERM $pid
  fi
  wait $pid; echo "== $lang $system rc=$? $(date -u +%FT%T) latest=$(cat "$dst/checkpoints/latest")"
done
echo "== done $(date -u +%FT%T)"
