"""Fixtures for end-to-end tests: real entry scripts on the shipped demo text, tiny models, CPU ranks."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ds_minimodel.cluster.launch import free_port, local_command
from ds_minimodel.train import checkpoint

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "demo_data"
RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_SIZE", "CROSS_RANK",
              "CROSS_SIZE")


def run_cmd(cmd: list[str], *, timeout: float = 300, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """Run a command with a hard timeout (the usual multi-process failure is a hang, not an error)."""
    # An in-process test may have set this process's rank variables; child launches must not inherit them.
    inherited = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
    env = {**inherited, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.update(kwargs.pop("env", {}))
    env = {k: v for k, v in env.items() if v is not None}  # None: leave the variable out
    kwargs.setdefault("cwd", REPO)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {proc.returncode}\n"
                             f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}")
    return proc


def deepspeed_cmd(num_ranks: int, script: str, *args: str) -> list[str]:
    launcher = shutil.which("deepspeed", path=str(Path(sys.executable).parent)) or "deepspeed"
    return [launcher, "--num_gpus", str(num_ranks), "--master_port", str(free_port()), script, *args]


def updates_logged(run_dir: Path) -> int:
    """How many updates a run has logged (its metrics.jsonl lines), 0 before the file exists. A run that starts
    afresh removes the file another one left (train/metrics.py): read as it goes, it may vanish between a look and a
    read, which counts as none yet."""
    try:
        return len((run_dir / "metrics.jsonl").read_text().splitlines())
    except FileNotFoundError:
        return 0


def torchrun_cmd(num_ranks: int, script: str, *args: str) -> list[str]:
    """PyTorch's launcher (one interpreter fewer than the deepspeed launcher's three)."""
    return local_command("torchrun", num_ranks, free_port(), script, list(args))


def fork_cmd(num_ranks: int, script: str, *args: str) -> list[str]:
    """The fork launcher (``stages/forkrun.py``): for runs that are not about the launcher. One interpreter imports
    torch and DeepSpeed once and forks the ranks, about 4 s of CPU less per rank than torchrun; test_cluster.py
    checks that its ranks train what torchrun's do."""
    return local_command("fork", num_ranks, free_port(), script, list(args))


def small_batch(name: str, folder: Path, batch: int = 4, micro: int = 2) -> Path:
    """``ds_configs/<name>`` with a global batch of ``batch`` sequences in micro-batches of ``micro``, written into
    ``folder``: for a test whose point is the file's precision or ZeRO stage, not its batch. On a CPU without native
    bf16 (AVX2 only) bf16 matrix products run about 35 times slower than fp32 ones, and the shipped files' batch of
    32 made each bf16 update of the tiny preset take seconds."""
    config = json.loads((REPO / "ds_configs" / name).read_text())
    config.update(train_batch_size=batch, train_micro_batch_size_per_gpu=micro)
    path = folder / f"small-{name}"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture(scope="session")
def en_data(tmp_path_factory) -> Path:
    """The demo English corpus, tokenized (vocabulary 2,000) and sharded, once per session."""
    out = tmp_path_factory.mktemp("data") / "en"
    return prepare(DEMO / "corpus/en.txt", out)


def prepare(corpus: Path, out: Path, vocab_size: int = 2000) -> Path:
    run_cmd([sys.executable, "-m", "ds_minimodel", "prepare", "--corpus", str(corpus), "--out", str(out),
             "--vocab-size", str(vocab_size), "--workers", "2", "--no-progress"])
    return out


@pytest.fixture(scope="session")
def de_data(tmp_path_factory) -> Path:
    """The demo German corpus with its own tokenizer."""
    return prepare(DEMO / "corpus/de.txt", tmp_path_factory.mktemp("data") / "de")


def seeded_pipeline_folder(out: Path, prepared: dict[str, Path]) -> Path:
    """``out`` made a pipeline's folder holding the ``prepared`` languages' data (same corpora and tokenizer
    settings as the pipeline's own prepare job, so it finds them done)."""
    from ds_minimodel.pipeline.ownership import OWNER_MARK

    for lang, data in prepared.items():
        shutil.copytree(data, out / "data" / lang)
    (out / OWNER_MARK).write_text("a pipeline's folder, its data prepared by the test")
    return out


def tiny_pipeline(tmp_path: Path, name: str, prepared: dict[str, Path], **sections: dict) -> Path:
    """A pipeline config of the tiny preset cut to two layers (``model``; what these runs test does not depend on the
    depth, and tiny's twelve made most of their CPU) on 2 CPU ranks, BL_BASE alone, English to German, no task, in
    ``tmp_path/name`` with the ``prepared`` languages' data copied in (the pipeline finds them done); ``sections``
    update the step sections' settings."""
    out = seeded_pipeline_folder(tmp_path / name, prepared)
    config = {
        "out": str(out), "ranks": 2, "preset": "tiny", "model": {"num_layers": 2}, "seq_len": 64, "vocab_size": 2000,
        "systems": ["bl_base"], "source": {"lang": "en", "corpus": str(DEMO / "corpus/en.txt")},
        "targets": [{"lang": "de", "corpus": str(DEMO / "corpus/de.txt")}],
        "step1": {"ds_config": "ds_configs/cpu_fp32.json"}, "step2": {"ds_config": "ds_configs/cpu_fp32.json"},
        "step3": {"ds_config": "ds_configs/cpu_finetune.json", "epochs": 1, "seeds": [1]}, "tasks": []}
    for section, values in sections.items():
        config[section].update(values)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return path


PIPELINE_SEEDS = [1, 2]
PIPELINE_STEP2_SAVES = [0, 30, 60]  # Step 2 saves its initial rows as update 0, then every 30
PIPELINE_TEST_SIZE = 100


def demo_test_config(root: Path, prepared: dict[str, Path]) -> dict:
    """The demo pipeline fixture's config (see ``demo_pipeline``), its output in ``root/out`` with the ``prepared``
    languages' data copied in, its DeepSpeed files and test-file heads written into ``root``. Also read by
    ``scripts/experiments/fixture_variants.py``, which times variants of it."""
    seeded_pipeline_folder(root / "out", prepared)
    config = json.loads((REPO / "configs/demo.json").read_text())
    config["out"] = str(root / "out")
    config["ranks"] = 1
    # One rank takes each update's 32 sequences in one micro-batch, not the demo's two of 16 (10-20% more tokens a
    # second at this size; test_source_model.py's one-rank pipeline trains with two micro-batches an update).
    for step in ("step1", "step1b", "step2", "step3"):
        ds = json.loads((REPO / config[step]["ds_config"]).read_text())
        ds["train_micro_batch_size_per_gpu"] = ds["train_batch_size"]
        if step == "step2":
            ds["zero_optimization"] = {"stage": 1}
        (root / f"{step}.json").write_text(json.dumps(ds))
        config[step]["ds_config"] = str(root / f"{step}.json")
    config["step1"].update(steps=900, save_every=900, log_every=100)
    config["step1b"].update(steps=60, save_every=60, log_every=30)
    config["step2"].update(steps=PIPELINE_STEP2_SAVES[-1], save_every=PIPELINE_STEP2_SAVES[1], log_every=5)
    config["step3"].update(epochs=2, seeds=PIPELINE_SEEDS)
    # Step 4 scores 4 systems x 3 checkpoints x 2 seeds on German test and dev (dev_choice: which checkpoint to use):
    # on their first examples (PIPELINE_TEST_SIZE), not all 1,586 and 1,499 (test: also English, each primary with its
    # own embeddings, 1,597); the scores' values are not checked.
    task = config["tasks"][0]
    for split, lang in [*(("test", lang) for lang in task["test"]), ("dev", "de")]:
        head = root / f"{split}.{lang}.jsonl"
        head.write_text("".join((REPO / task[split][lang]).read_text(encoding="utf-8").splitlines(keepends=True)
                                [:PIPELINE_TEST_SIZE]))
        task[split][lang] = str(head)
    return config


@pytest.fixture(scope="session")
def demo_pipeline(tmp_path_factory, en_data, de_data) -> dict:
    """configs/demo.json through the pipeline (the demo preset) with its output in a temporary folder, shorter stages
    and one CPU rank where the demo has two (same global batch, in one micro-batch): at this model size an update
    takes as long on one rank as on two, and the suite's other worker gets the second core. The pipeline's
    two-rank launches are tested in test_slurm.py (and every stage's own two-rank runs in test_pretrain.py,
    test_adapt.py, test_cluster.py). Its Step-1 and Step-1b models are also the bodies the Step-2 tests adapt
    (test_adapt.py), and its Step-2 runs are the ones test_adapt.py checks: under ZeRO stage 1 here (stage 0 is every
    other run's, and test_adapt.py's FOCUS run trains under stage 2 in bf16 on two ranks). Its data are the session's
    (the same corpora and tokenizer settings, so the pipeline finds them done): the worker that runs it prepares them
    once for its other tests too. The pipeline's own prepare job runs in test_source_model.py and test_systems.py."""
    root = tmp_path_factory.mktemp("pipeline")
    config = demo_test_config(root, {"en": en_data, "de": de_data})
    path = root / "pipeline.json"
    path.write_text(json.dumps(config))
    # Its 14 training jobs share one launch, on one rank one plain process whatever --launcher names
    # (pipeline.workers.launch_command; the launchers' commands are unit-tested in test_launch.py and the deepspeed
    # launcher runs in test_pretrain, test_cluster and test_stopping).
    # Without DS_ACCELERATOR, as a user runs it from the venv: the package keeps DeepSpeed's CPU notice out itself.
    proc = run_cmd([sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(path), "--launcher", "torchrun"],
                   timeout=900, env={"DS_ACCELERATOR": None})
    return {"out": Path(config["out"]), "config": path, "stdout": proc.stdout, "stderr": proc.stderr,
            "settings": config}


@pytest.fixture(scope="session")
def primaries(demo_pipeline) -> dict[str, Path]:
    """The pipeline's Step-1 models (demo preset): normal, MiniJoint and BL_SMALL."""
    out = demo_pipeline["out"]
    return {v: checkpoint.latest_checkpoint(out / "step1" / v) for v in ("base", "minijoint", "small")}
