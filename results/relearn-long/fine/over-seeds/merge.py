"""The fine run's Step-2 seeds as one pipeline results.json with further Step-2 runs (``step2_seeds``), for ``python -m
ds_minimodel analysis``'s Table 3 over Step-2 runs: the main run's readings are ``../finer/``'s (seed 1, saves 25
apart around the crossings), each further run's are a ``--alone`` scoring of ``../score.py`` (``../seed2/``,
``../seed2-fr/``, ``../seed2-es/``: seed 2; ``../seed3/``, ``../seed3-fr/``, ``../seed3-es/``: seed 3), their records
tagged with their Step-2 seed as the pipeline's Step 4 tags them.

    python3 results/relearn-long/fine/over-seeds/merge.py OUT     # writes OUT/results.json
"""
import dataclasses
import sys
from pathlib import Path

from ds_minimodel.pipeline.records import Results
from ds_minimodel.pipeline.results import over_seeds

fine = Path(__file__).resolve().parent.parent
further = {2: ("seed2", "seed2-fr", "seed2-es"), 3: ("seed3", "seed3-fr", "seed3-es")}
main = Results.load(fine / "finer/results.json")
runs = [dataclasses.replace(r, step2_seed=k) for k, folders in further.items() for folder in folders
        for r in Results.load(fine / folder / "results.json").zero_shot]
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
dataclasses.replace(main, step2_runs=runs, step2_runs_over_seeds=over_seeds(runs)).write(out / "results.json")
print(f"{len(main.zero_shot)} main readings, {len(runs)} of further Step-2 runs: {out / 'results.json'}")
