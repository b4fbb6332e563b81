"""Where an update's time goes, by kernel class: torch.profiler's events of the timed updates summed into matmul,
attention, norm/activation, loss, optimizer, copy/cast and other, and the time no kernel ran ("idle" on a GPU: the
device waited for the host; on a CPU: time outside aten operators, i.e. Python and framework overhead).

The classes are read from kernel names (GPU) or aten operator names (CPU), first match wins, in the order of
``CLASSES``. Names vary with the library that made the kernel (cuBLAS, CUTLASS, flash attention, Triton), so the
profile keeps the twenty largest names of each class with their times: a reader can check the classification.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("optimizer", ("multi_tensor", "adamfunctor", "fused_adam", "_foreach_", "_amp_foreach")),
    ("attention", ("flash", "fmha", "attention", "sdpa", "scaled_dot_product")),
    ("matmul", ("gemm", "cutlass", "nvjet", "xmma", "cublas", "wgmma", "matmul", "aten::mm", "aten::addmm",
                "aten::bmm", "aten::baddbmm", "triton_tem_")),
    ("loss", ("cross_entropy", "log_softmax", "logsoftmax", "nll_loss", "logsumexp")),
    ("norm/activation", ("layer_norm", "layernorm", "rms_norm", "gelu", "softmax", "dropout", "triton_")),
    ("copy/cast", ("copy", "cast", "fill", "memset", "memcpy", "aten::to", "aten::cat", "index", "gather", "scatter")),
)
OTHER = "other"
IDLE = "idle"
PHASES = ("forward+loss", "backward", "optimizer step")
"""The bench's own ``record_function`` ranges: on a GPU torch reports each also as a device-side range whose
"self" time is the whole phase's, so they (and torch's ``Optimizer.step#...`` ranges) are not kernels."""


def is_annotation(name: str, flagged: bool = False) -> bool:
    return flagged or name in PHASES or name.startswith(("Optimizer.step#", "Optimizer.zero_grad#", "ProfilerStep#"))


def kernel_class(name: str) -> str:
    lowered = name.lower()
    for label, patterns in CLASSES:
        if any(p in lowered for p in patterns):
            return label
    return OTHER


def summarise_profile(events: Any, wall_s: float, cuda: bool, stored: bool = False) -> dict[str, Any]:
    """``events``: ``profiler.key_averages()`` over updates that took ``wall_s`` seconds in all. Seconds and shares
    per class; on a GPU from the device kernels' own time, on a CPU from aten operators' self time (``stored``:
    every event counts, as ``resummarise`` passes names already chosen)."""
    seconds: dict[str, float] = {label: 0.0 for label, _ in CLASSES} | {OTHER: 0.0}
    names: dict[str, dict[str, float]] = {label: {} for label in seconds}
    for event in events:
        if cuda:
            if str(getattr(event, "device_type", "")).rsplit(".", 1)[-1] != "CUDA":
                continue
            spent = event.self_device_time_total / 1e6
        else:
            if not (stored or event.key.startswith("aten::")):
                continue
            spent = event.self_cpu_time_total / 1e6
        if spent <= 0 or is_annotation(event.key, bool(getattr(event, "is_user_annotation", False))):
            continue
        label = kernel_class(event.key)
        seconds[label] += spent
        names[label][event.key] = names[label].get(event.key, 0.0) + spent
    busy = sum(seconds.values())
    seconds[IDLE] = max(wall_s - busy, 0.0)
    basis = "CUDA kernels' time" if cuda else "aten operators' self CPU time"
    return {"wall_s": wall_s, "busy_s": busy, "basis": basis,
            "seconds": seconds, "shares": {label: s / wall_s if wall_s else 0.0 for label, s in seconds.items()},
            "top": {label: dict(sorted(found.items(), key=lambda kv: -kv[1])[:20]) for label, found in names.items()
                    if found}}


def resummarise(summary: dict[str, Any]) -> dict[str, Any]:
    """A stored profile classified again with this module's classes, from its per-name times (``top``): for a
    profile written before a change of the classes. Names beyond a class's twenty largest are not stored; their
    time is reported as "unlisted" (the difference between the stored busy time and the names')."""
    names = {name: spent for found in summary["top"].values() for name, spent in found.items()}
    events = [_Stored(name, spent) for name, spent in names.items()]
    fresh = summarise_profile(events, summary["wall_s"], cuda=False, stored=True)
    listed = fresh["busy_s"]
    unlisted = max(summary["busy_s"] - sum(v for k, v in names.items() if is_annotation(k)) - listed, 0.0)
    fresh["seconds"]["unlisted"] = unlisted
    fresh["shares"]["unlisted"] = unlisted / summary["wall_s"] if summary["wall_s"] else 0.0
    fresh["seconds"][IDLE] = max(summary["wall_s"] - listed - unlisted, 0.0)
    fresh["shares"][IDLE] = fresh["seconds"][IDLE] / summary["wall_s"] if summary["wall_s"] else 0.0
    fresh["basis"] = summary["basis"]
    return fresh


class _Stored:
    def __init__(self, key: str, seconds: float) -> None:
        self.key, self.self_cpu_time_total = key, seconds * 1e6


def start_profiler(cuda: bool) -> Any:
    """torch.profiler recording the host's operators, and the GPU's kernels where ``cuda``; started."""
    import torch

    kinds = torch.profiler.ProfilerActivity
    profiler = torch.profiler.profile(activities=[kinds.CPU, *([kinds.CUDA] if cuda else [])])
    profiler.__enter__()
    return profiler


def kernel_table(events: Any, cuda: bool) -> str:
    """torch's table of the thirty largest kernels (GPU) or operators (CPU) by their own time, the order named first."""
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    return f"sorted by {sort}\n" + events.table(sort_by=sort, row_limit=30, max_name_column_width=60)


class UpdateProfiler:
    """torch.profiler over ``count`` updates of a training run (``TrainConfig.profile_updates``), those after the
    first ``warmup`` of this process: kernel choice, autotuning and the allocator's first growth stay outside. The
    loop calls ``before`` and ``after`` each update; ``write`` puts the profiled updates' time by kernel class in
    ``<run>/profile.json`` and torch's table of the largest kernels in ``<run>/profile.txt``. On a GPU the updates'
    own wall clock is the basis, so "idle" is the time the device waited for the host inside them."""

    WARMUP = 10

    def __init__(self, count: int, *, start: int, steps: int, cuda: bool) -> None:
        self.count, self.cuda = count, cuda
        self.first = start + min(self.WARMUP, max(steps - start - count, 0)) + 1
        self.profiler: Any = None
        self.seconds, self.done = 0.0, 0

    def before(self, update: int) -> None:
        if update == self.first and self.profiler is None:
            self.profiler = start_profiler(self.cuda)

    def after(self, seconds: float) -> bool:
        """Count an update's seconds; True once the profiled updates are all done."""
        if self.profiler is None or self.done >= self.count:
            return False
        self.seconds += seconds
        self.done += 1
        return self.done == self.count

    def write(self, run_dir: Path) -> None:
        """Stop profiling and write what it saw (nothing if no update was profiled: a run resumed past them)."""
        if self.profiler is None:
            return
        profiler, self.profiler = self.profiler, None
        profiler.__exit__(None, None, None)
        if not self.done:
            return
        events = profiler.key_averages()
        summary = summarise_profile(events, self.seconds, self.cuda)
        (run_dir / "profile.txt").write_text(f"# updates {self.first}-{self.first + self.done - 1}, "
                                             + kernel_table(events, self.cuda) + "\n", encoding="utf-8")
        record = {"first_update": self.first, "updates": self.done, "seconds_per_update": self.seconds / self.done,
                  **summary}
        (run_dir / "profile.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def profile_table(summary: dict[str, Any]) -> str:
    """The classes as a Markdown table (seconds per update and share of the wall clock)."""
    lines = ["| class | s in all | share of wall clock |", "|---|---:|---:|"]
    for label, spent in sorted(summary["seconds"].items(), key=lambda kv: -kv[1]):
        lines.append(f"| {label} | {spent:.4f} | {summary['shares'][label]:.1%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the profile part's classes of a stored ``gpu_run.json``, classified again (``resummarise``)."""
    import argparse
    import json
    from pathlib import Path

    p = argparse.ArgumentParser(prog="python -m ds_minimodel.train.kernel_classes", description=main.__doc__)
    p.add_argument("gpu_run_json", type=Path)
    args = p.parse_args(argv)
    figures = json.loads(args.gpu_run_json.read_text(encoding="utf-8"))
    for row in (figures.get("parts", {}).get("profile") or {}).get("rows", []):
        if row.get("profile"):
            print(f"\n{row['label']}, micro-batch {row['micro_batch']}, {row['median_s']:.4f} s/update (median), "
                  f"{row['profile']['wall_s']:.3f} s profiled:\n{profile_table(resummarise(row['profile']))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
