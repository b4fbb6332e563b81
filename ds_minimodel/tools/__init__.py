"""Tools beside the method: benchmarks, the measured FLOP cross-check, the word-order probe."""
