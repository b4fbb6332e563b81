#!/bin/bash
# MiniJoint's Step 2 again with Step-2 seeds SEEDS (default "2 3"; the main run's is 1) in LANGS (default "de fr es"),
# saved every 25 updates until its save at UNTIL (default 600; SIGTERM then: it saves where it is and stops), as the
# further Step-2 seeds of BL_BASE and MiniPost were run (../../../relearn-long/fine/seed2/run.sh): the same body, data
# and 1,800-update schedule as this folder's step2-<lang>-minijoint.json, with seed, out, save_every and run name
# changed. Run again, it skips the runs saved at UNTIL or later and resumes the others. From the worktree that ran them:
#   bash results/word-order/cpu-bodies/over-seeds/minijoint_seeds.sh runs/bshift/seed-step2
set -u
out=$1 until=${UNTIL:-600}
here=$(dirname "$0")/..
export PATH=/work/main/.venv/bin:$PATH
echo "== start $(date -u +%FT%T) $(git rev-parse --short HEAD)"
mkdir -p "$out/specs"
stop=$(printf step_%08d "$until")
for seed in ${SEEDS:-2 3}; do for lang in ${LANGS:-de fr es}; do
  dst=$out/seed$seed/$lang/minijoint spec=$out/specs/step2-$lang-minijoint-seed$seed.json
  at=$(sed 's/^step_0*//' "$dst/checkpoints/latest" 2>/dev/null)
  if [ "${at:-0}" -ge "$until" ]; then echo "== $lang seed $seed done (latest $at)"; continue; fi
  resume=false; [ -e "$dst/run.json" ] && resume=true
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); \
      d.update(seed=int(sys.argv[5]), out=sys.argv[3], save_every=25, log_root=sys.argv[4], \
          run_name=d['run_name'] + '-seed' + sys.argv[5], resume=sys.argv[6] == 'true'); \
      json.dump(d, open(sys.argv[2], 'w'), indent=2)" \
      "$here/step2-$lang-minijoint.json" "$spec" "$dst" "$out/tensorboard" "$seed" "$resume"
  python -m torch.distributed.run --nproc_per_node 2 --master_port 29617 run_adapt.py --config "$spec" \
      >> "$out/step2-$lang-minijoint-seed$seed.log" 2>&1 &
  pid=$!
  if [ "$until" -lt "$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['steps'])" "$spec")" ]; then
    until [ "$(cat "$dst/checkpoints/latest" 2>/dev/null)" = "$stop" ] || ! kill -0 $pid 2>/dev/null; do sleep 2; done
    kill -TERM $pid 2>/dev/null   # not at the schedule's end: there the run stops and closes by itself
  fi
  wait $pid; echo "== $lang seed $seed rc=$? $(date -u +%FT%T) latest=$(cat "$dst/checkpoints/latest")"
done; done
echo "== done $(date -u +%FT%T)"
