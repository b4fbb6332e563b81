"""Clusters: hostfiles, launcher command lines, Slurm batch scripts and rank variables. String handling only: nothing
here imports torch."""
