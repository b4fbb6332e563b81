"""The fine run's Step-2 seeds as one pipeline results.json with further Step-2 runs (``step2_seeds``), for ``python -m
ds_minimodel analysis``'s Table 3 over Step-2 runs: the main run's readings are ``../finer/``'s (seed 1, saves 25
apart around the crossings), each further run's are a ``--alone`` scoring of ``../score.py`` (``../seed2/``,
``../seed2-fr/``, ``../seed2-es/``: seed 2; ``../seed3/``, ``../seed3-fr/``, ``../seed3-es/``: seed 3), their records
tagged with their Step-2 seed as the pipeline's Step 4 tags them.

    python3 results/relearn-long/fine/over-seeds/merge.py OUT     # writes OUT/results.json

Any other run's the same way: ``merge.py OUT MAIN K=RESULTS [K=RESULTS ...]`` takes the main run's readings from the
results.json MAIN and those of Step-2 seed K from each RESULTS (``../../../word-order/cpu-bodies/`` merges its seeds
so)."""
import dataclasses
import sys
from pathlib import Path

from ds_minimodel.pipeline.records import Results
from ds_minimodel.pipeline.results import over_seeds

fine = Path(__file__).resolve().parent.parent
further = [(k, fine / folder / "results.json") for k, folders in
           {2: ("seed2", "seed2-fr", "seed2-es"), 3: ("seed3", "seed3-fr", "seed3-es")}.items() for folder in folders]
main = fine / "finer/results.json"
if len(sys.argv) > 2:
    main, pairs = Path(sys.argv[2]), [arg.partition("=") for arg in sys.argv[3:]]
    if not pairs or any(not sep or not k.isdigit() for k, sep, _ in pairs):
        raise SystemExit("usage: merge.py OUT [MAIN K=RESULTS [K=RESULTS ...]]")
    further = [(int(k), Path(path)) for k, _, path in pairs]
main = Results.load(main)
runs = [dataclasses.replace(r, step2_seed=k) for k, path in further for r in Results.load(path).zero_shot]
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
dataclasses.replace(main, step2_runs=runs, step2_runs_over_seeds=over_seeds(runs)).write(out / "results.json")
print(f"{len(main.zero_shot)} main readings, {len(runs)} of further Step-2 runs: {out / 'results.json'}")
