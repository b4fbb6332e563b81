"""The whole method from one config: its settings, the plan of jobs, results, Slurm submission and the analysis."""
