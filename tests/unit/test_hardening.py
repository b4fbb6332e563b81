"""Bad inputs are refused with one line naming the file or option and the problem, before any work and without
changing what is already written (issue 18): output folders, one writer per folder, checks made before the first
update. The signal and launcher cases run real processes: tests/integration/test_signals.py; code-running
checkpoint files: tests/integration/test_checkpoint_safety.py."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ds_minimodel.config import get_preset
from ds_minimodel.data import prepare
from ds_minimodel.ds_config import load_ds_config
from ds_minimodel.errors import InputError
from ds_minimodel.folders import claim, describe, require_output
from ds_minimodel.model import surgery
from ds_minimodel.model.encoder import MaskedLM
from ds_minimodel.pipeline.plan import Pipeline
from ds_minimodel.pipeline.settings import PipelineConfig
from ds_minimodel.stages import finetune, pretrain, runner
from ds_minimodel.tasks.readers import read_conllu
from ds_minimodel.train import checkpoint

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests/fixtures/tasks"


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture()
def folders(tmp_path: Path) -> dict[str, Path]:
    """One folder of each kind a command must not write over."""
    model = MaskedLM(get_preset("tiny").replace(vocab_size=100))
    checkpoint.save_model_folder(tmp_path / "model", model.state_dict(), {"model_config": model.cfg.to_dict()})
    data = tmp_path / "data"
    data.mkdir()
    for name in ("meta.json", "tokens_00000.bin", "lines.npy", "spm.model"):
        (data / name).write_text("x")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (tmp_path / "file").write_text("x")
    return {"model": tmp_path / "model", "data": data, "run": run, "file": tmp_path / "file"}


def test_output_folders_name_what_they_hold_and_are_left_unchanged(folders, capsys):
    assert describe(folders["data"]).startswith("a prepared data folder")
    assert describe(folders["run"]).startswith("a training run")
    assert describe(folders["model"]).startswith("a model folder")
    before = {name: snapshot(f) for name, f in folders.items() if f.is_dir()}
    cases = [
        (surgery.main, ["plug", "--model", "m", "--embeddings", "e", "--out", str(folders["run"])], "a training run"),
        (surgery.main, ["extract-mini", "--from", "m", "--out", str(folders["data"])], "a prepared data folder"),
        (prepare.main, ["--corpus", str(FIXTURES / "generic.jsonl"), "--out", str(folders["model"])], "a model folder"),
        (pretrain.main, ["--ds-config", "x.json", "--data", "d", "--out", str(folders["data"])],
         "a prepared data folder"),
        (pretrain.main, ["--ds-config", "x.json", "--data", "d", "--out", str(folders["model"])], "a model folder"),
        (pretrain.main, ["--ds-config", "x.json", "--data", "d", "--out", str(folders["file"])], "an existing file"),
    ]
    for main, argv, what in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and what in err and "Traceback" not in err, err
    assert before == {name: snapshot(f) for name, f in folders.items() if f.is_dir()}
    require_output(folders["run"], own=checkpoint.is_run_folder)  # a run's own folder: --resume continues it
    require_output(folders["data"], own=prepare.is_data_folder)  # prepare re-encodes its own folder


HOLD = """
import sys, time
from ds_minimodel.folders import claim
claim(sys.argv[1], "test holder")
print("held", flush=True)
time.sleep(60)
"""


def test_one_live_writer_per_folder_and_a_dead_one_does_not_block(tmp_path):
    folder = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(InputError, match=rf"in use by test holder \(pid {holder.pid} on "):
            claim(folder, "second")
        holder.send_signal(signal.SIGKILL)  # a writer that dies without cleaning up
        holder.wait(timeout=10)
        claim(folder, "second")  # the kernel released its lock
        assert f"pid {os.getpid()}" in (folder / ".writer.lock").read_text()
    finally:
        holder.kill()


def test_the_pipelines_list_names_the_runs_a_live_process_writes(tmp_path, capsys):
    """``pipeline --list`` reads the kernel's locks, never takes one: a run being written shows as running, by seed
    for Step 3 and by language for Step 2, with how far it is, and as to run again once its writer is gone."""
    from ds_minimodel.folders import live_writer
    from ds_minimodel.pipeline.command import main as pipeline_main
    from ds_minimodel.pipeline.ownership import main as own

    path = pipeline_config(tmp_path, step3__seeds=[1, 2, 3])
    out = tmp_path / "out"
    assert own([str(out), str(path)]) == 0  # a pipeline's folder, as the pipeline's first run leaves it

    def listed() -> dict[str, str]:
        cwd = os.getcwd()
        os.chdir(REPO)
        try:
            assert pipeline_main(["--config", str(path), "--list"]) == 0
        finally:
            os.chdir(cwd)
        return {line.split()[0]: line.rsplit("[", 1)[1].rstrip("]") for line in capsys.readouterr().out.splitlines()}

    assert listed()["step3-base"] == "to run"
    holders = [subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
               for folder in (out / "step3/lohelp/base/seed2", out / "step2/de/minipost")]
    try:
        assert [holder.stdout.readline().strip() for holder in holders] == ["held", "held"]
        assert live_writer(out / "step3/lohelp/base/seed2") == f"test holder (pid {holders[0].pid} on " \
            f"{socket.gethostname()})"
        assert live_writer(out / "step3/lohelp/base/seed1") is None
        lock = out / "step2/de/minipost/.writer.lock"  # a lock on the file's inode by a process it does not name:
        named = lock.read_text()  # another file's of the same inode number on another filesystem
        lock.write_text(named.replace(f"pid {holders[1].pid} ", "pid 1 "))
        assert live_writer(lock.parent) is None
        lock.write_text(named)
        status = listed()
        assert status["step3-base"] == "running: seed 2; to run: seed 1, seed 3"
        assert status["step3-small"] == "to run"
        assert status["step2-minipost"] == "running: de" and status["step2-bl_base"] == "to run: de"
        # A started run says how far it is: a live one its last logged update (a line still being written is not
        # read), a stopped one the checkpoint it resumes from.
        seed2, stopped = out / "step3/lohelp/base/seed2", out / "step2/de/bl_base"
        for folder in (seed2, stopped):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "run.json").write_text(json.dumps({"train": {"steps": 600}}))
        (seed2 / "metrics.jsonl").write_text("".join(json.dumps({"step": k, "loss": 1.0}) + "\n" for k in (25, 50))
                                             + '{"step": 75, "lo')
        (stopped / "checkpoints/step_00000197").mkdir(parents=True)
        (stopped / "checkpoints/step_00000197/meta.json").write_text(json.dumps({"weights_sha256": "0", "step": 197}))
        status = listed()
        assert status["step3-base"] == "running: seed 2 (update 50 of 600); to run: seed 1, seed 3"
        assert status["step2-bl_base"] == "to run: de (resumes from update 197 of 600)"
        for holder in holders:
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=10)
        assert live_writer(out / "step3/lohelp/base/seed2") is None  # the lock file stays; its lock went with it
        status = listed()
        assert status["step3-base"] == "to run" and status["step2-minipost"] == "to run: de"
    finally:
        for holder in holders:
            holder.kill()


def pipeline_config(tmp_path: Path, **changes) -> Path:
    config = json.loads((REPO / "configs/demo.json").read_text())
    config.update(out=str(tmp_path / "out"))
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            config[section][field] = value
        else:
            config[section] = value
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps(config))
    return path


def test_the_pipeline_checks_everything_before_the_first_job(tmp_path):
    cjk = tmp_path / "zh.txt"
    cjk.write_text("\n".join("".join(chr(0x4E00 + (i * 7 + j * 13) % 3000) for j in range(40)) for i in range(400)))
    latin1 = tmp_path / "de.latin1.txt"  # the demo's German, saved in another encoding
    latin1.write_bytes((REPO / "demo_data/corpus/de.txt").read_text(encoding="utf-8").encode("latin-1", "replace"))
    cases = [
        ({"step2__steps": 0}, "step2: steps must be greater than or equal to 1"),
        ({"seq_len": 4096}, "seq_len 4096 exceeds the demo preset's 64 positions"),
        ({"aux_layer": 9}, "aux_layer must be between 1 and 5"),
        ({"preset": "huge"}, r"pipeline.json: preset: unknown model preset 'huge'; known presets: base, demo"),
        ({"step3__max_len": 512}, "task lohelp.s finetuning: needs max_len at most 64"),
        # A section sets its stage spec's fields, each checked by the spec's annotation; not the plan's own
        ({"step3__epochs": 0}, "step3: epochs must be greater than 0, got 0"),
        ({"step3__seeds": []}, r"step3: seeds must be at least 1 item, got \[\]$"),
        ({"step2__rare_vectors": "grams"}, "step2: rare_vectors must be 'drawn' or 'ngrams', got 'grams'"),
        ({"step2__body": "x"}, r"step2: unknown key\(s\) body; known keys: ds_config, steps, save_every"),
        ({"step2__keep_checkpoints": 2}, r"step2: unknown key\(s\) keep_checkpoints"),  # Step 4 scores them all
        ({"targets": [{"lang": "zh", "corpus": str(cjk)}]}, "cannot hold this text's characters"),
        ({"step1__ds_config": "ds_configs/none.json"}, "DeepSpeed config not found"),
        ({"tasks": [], "source_relearn": ["bl_base"]},
         "source_relearn is a control scored on a task's source-language test file, but tasks is empty"),
        ({"targets": [{"lang": "de", "corpus": str(latin1)}]}, "de.latin1.txt: .* sampled lines are not valid UTF-8"),
    ]
    for changes, message in cases:
        path = pipeline_config(tmp_path, **changes)
        with pytest.raises(InputError, match=message):
            Pipeline(PipelineConfig.load(path), str(path))
    task = json.loads((REPO / "configs/demo.json").read_text())["tasks"][0]
    path = pipeline_config(tmp_path, tasks=[{**task, "test": {"de": str(tmp_path / "missing.jsonl")}}])
    with pytest.raises(InputError, match="missing.jsonl: task file not found"):
        Pipeline(PipelineConfig.load(path), str(path))
    # A QA task whose windows cannot hold the longest question it allows: known from its settings, refused now
    # rather than when Step 3 meets such a question hours later.
    squad = str(REPO / "tests/fixtures/tasks/squad.train.json")
    qa = {"name": "qa", "format": "squad", "train": squad, "test": {"de": squad},
          "finetune": {"max_len": 64, "doc_stride": 16}}
    path = pipeline_config(tmp_path, tasks=[qa])
    with pytest.raises(InputError, match=r"task qa's finetuning: max_len 64 leaves -4 context tokens per window after "
                                         r"a question of 64 tokens .* raise max_len to at least 85"):
        Pipeline(PipelineConfig.load(path), str(path))
    # Per-language tokenizer settings make the same language fit (the demo's German test file goes with German).
    demo_task = json.loads((REPO / "configs/demo.json").read_text())["tasks"][0]
    zh_only = {**demo_task, "dev": {"en": demo_task["dev"]["en"]}, "test": {"en": demo_task["test"]["en"]}}
    path = pipeline_config(tmp_path, targets=[{"lang": "zh", "corpus": str(cjk), "vocab_size": 4000}], tasks=[])
    Pipeline(PipelineConfig.load(path), str(path))
    # A task with no test file in a target language would finetune for nothing (issue 49: found after Step 1).
    path = pipeline_config(tmp_path, targets=[{"lang": "zh", "corpus": str(cjk), "vocab_size": 4000}],
                           tasks=[zh_only])
    with pytest.raises(InputError, match=r"task lohelp has no test file in a target language \(zh\)"):
        Pipeline(PipelineConfig.load(path), str(path))
    # A test file of a language the config does not adapt to is refused, not dropped from the results.
    path = pipeline_config(tmp_path, targets=[{"lang": "zh", "corpus": str(cjk), "vocab_size": 4000}])
    with pytest.raises(InputError, match=r"task lohelp: a dev or test file for 'de', which is neither the source nor "
                                         r"a target language \(en, zh\): it would never be scored"):
        Pipeline(PipelineConfig.load(path), str(path))
    assert not (tmp_path / "out").exists()  # nothing was written


def test_finetuning_reads_its_inputs_before_training(folders, tmp_path, capsys):
    bad_dev = tmp_path / "dev.jsonl"
    bad_dev.write_text('{"text": "a", "label": "scalc"}\nnot json\n')
    common = ["--model", str(folders["model"]), "--task", "lohelp", "--format", "generic", "--train",
              str(FIXTURES / "lohelp.train.en.jsonl"), "--ds-config", "ds_configs/cpu_finetune.json"]
    assert finetune.main([*common, "--max-len", "4096", "--out", str(tmp_path / "a")]) == 2
    assert "--max-len 4096 exceeds the model's 128 positions" in capsys.readouterr().err
    assert finetune.main([*common, "--dev", str(bad_dev), "--out", str(tmp_path / "b")]) == 2
    assert f"{bad_dev}:2" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_other_mistakes_get_one_line(tmp_path, folders):
    conllu = tmp_path / "bad.conllu"
    conllu.write_text("1\tDogs\tdog\tNOUNS\t_\t_\t0\troot\t_\t_\n\n")
    with pytest.raises(InputError, match=r"bad.conllu:1: unknown UPOS tag 'NOUNS'"):
        read_conllu(conllu)
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"train_batch_size": 8, "zero_optimization": {"stage": 7}}))
    with pytest.raises(InputError, match="zero_optimization.stage must be 0, 1, 2 or 3, got 7"):
        load_ds_config(config)


@pytest.mark.parametrize("argv, message", [
    (["--epochs", "0"], "error: --epochs: input should be greater than 0 (got 0.0)"),  # trained at rate 0 before
    (["--epochs", "-2"], "error: --epochs: input should be greater than 0 (got -2.0)"),
    (["--warmup-ratio", "1.5"], "error: --warmup-ratio: input should be less than 1 (got 1.5)"),
    (["--max-len", "ten"], "Error parsing --max-len: invalid literal for int() with base 10: 'ten'"),  # tyro's
    (["--save-every", "0"], "error: --save-every: input should be greater than or equal to 1 (got 0)"),
    (["--format", "csv"], "error: --format: must be one of conllu, generic, multinli, pawsx, squad, xnli, got 'csv'"),
])
def test_bad_options_are_refused_where_they_are_parsed_naming_the_option(argv, message, capsys):
    common = ["--model", "m", "--task", "t", "--format", "generic", "--train", "t.jsonl", "--ds-config", "x.json",
              "--out", "o"]
    with pytest.raises(SystemExit) as exit_:
        finetune.main([*common, *argv])  # refused before the run folder is looked at
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pretrain.main(["--ds-config", "x", "--data", "d", "--out", "o", "--steps", "0"])
    assert "error: --steps: input should be greater than or equal to 1 (got 0)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pretrain.main(["--ds-config", "x", "--data", "d", "--out", "o", "--variant", "huge"])
    assert "error: --variant: unknown primary 'huge'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # Step 1b and head training were variants of Step 1 before they had specs
        pretrain.main(["--ds-config", "x", "--data", "d", "--out", "o", "--variant", "minipost", "--from", "m"])
    assert "error: --variant: minipost is its own job now: run_minipost.py" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pretrain.main(["--ds-config", "x", "--data", "d", "--out", "o", "--variant", "head"])
    assert "error: --variant: head is its own job now: run_head.py" in capsys.readouterr().err


def deepspeed_json(tmp_path: Path, name: str, change) -> Path:
    config = json.loads((REPO / "ds_configs/cpu_fp32.json").read_text())
    change(config)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return path


DS_MISTAKES = {  # issue 30: each used to fail after the process group (and, in a pipeline, Step 1) had started
    "negative-rate": (lambda c: c["optimizer"]["params"].update(lr=-1e-3),
                      "optimizer.params.lr must be a positive number, got -0.001"),
    "betas": (lambda c: c["optimizer"]["params"].update(betas=[0.9, 1.0]),
              r"optimizer.params.betas must be two numbers in \[0, 1\), got \[0.9, 1.0\]"),
    "optimizer": (lambda c: c["optimizer"].update(type="AdamWW"), "optimizer.type 'AdamWW' is neither one of"),
    "precision": (lambda c: c.update(fp16={"enabled": True}, bf16={"enabled": True},
                                     zero_optimization={"stage": 1}), "fp16.enabled and bf16.enabled are both true"),
    "scheduler": (lambda c: c["scheduler"].update(type="WarmupDecay"), "scheduler.type 'WarmupDecay' is neither"),
    "zero-field": (lambda c: c["zero_optimization"].update(overlap_comm="maybe"),
                   "DeepSpeedZeroConfig: overlap_comm: Input should be a valid boolean"),
    # These three crashed with a traceback, or passed and then disagreed with DeepSpeed ("false" is true to Python).
    "scheduler-name": (lambda c: c.update(scheduler="WarmupLR"),
                       "scheduler must be an object with type and params, got 'WarmupLR'"),
    "scheduler-params": (lambda c: c["scheduler"].update(params=[]), r"scheduler.params must be an object, got \[\]"),
    "precision-string": (lambda c: c.update(bf16={"enabled": "false"}), "bf16.enabled must be true or false, got 'false'"),
}


@pytest.mark.parametrize("name", sorted(DS_MISTAKES))
def test_every_deepspeed_json_mistake_is_one_line_before_any_work(name, tmp_path, capsys, monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError("the process group was started before the DeepSpeed JSON was checked")

    monkeypatch.setattr(runner, "init_distributed", started)
    change, message = DS_MISTAKES[name]
    path = deepspeed_json(tmp_path, name, change)
    out = tmp_path / "run"
    # The entry script: refused before the process group starts, the data is opened or the folder is made.
    assert pretrain.main(["--ds-config", str(path), "--data", str(tmp_path / "no-data"), "--out", str(out),
                          "--steps", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and re.search(message, err), err
    assert not out.exists()
    # The pipeline: refused in its pre-flight, before any corpus is prepared.
    config = pipeline_config(tmp_path, step2__ds_config=str(path))
    with pytest.raises(InputError, match=message):
        Pipeline(PipelineConfig.load(config), str(config))
    assert not (tmp_path / "out").exists()


def test_resume_with_every_checkpoint_damaged_is_refused(folders, capsys):
    run = folders["run"]
    for step in (1, 2):
        ckpt = run / "checkpoints" / checkpoint.tag_for(step)
        ckpt.mkdir()
        (ckpt / "model.pt").write_text("x")
        (ckpt / "meta.json").write_text(json.dumps({"weights_sha256": "0", "files": {
            "model.pt": {"bytes": 1, "sha256": "0" * 64}}}))
    (run / "checkpoints" / checkpoint.tag_for(3)).mkdir()  # no meta.json: named, not silently skipped
    said = []
    with pytest.raises(InputError, match="every checkpoint is damaged"):
        checkpoint.latest_valid_checkpoint(run, say=said.append)
    assert any("step_00000003 has no meta.json" in line for line in said)


def test_ctrl_c_asks_for_a_save_and_a_second_one_stops_at_once():
    from ds_minimodel.train.faults import StopSignals

    signals = StopSignals()
    signals._handle(signal.SIGINT, None)  # the first: finish the update, save, exit 130 (test_reliability.py)
    assert signals.stop_requested() and signals.reason() == "SIGINT"
    with pytest.raises(KeyboardInterrupt):
        signals._handle(signal.SIGINT, None)


def test_ctrl_c_outside_the_training_loop_exits_130_with_one_line(tmp_path):
    """A second Ctrl-C, or one before training begins (here: while the process waits), exits 130, no traceback."""
    script = ("import time\nfrom ds_minimodel.stages.cli import run_main\n"
              "import argparse\n"
              "def slow(args):\n    print('started', flush=True)\n    time.sleep(30)\n"
              f"raise SystemExit(run_main(slow, argparse.Namespace(out={str(tmp_path / 'o')!r})))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err, err


def test_issue_49s_silently_accepted_inputs_are_refused_before_any_work(tmp_path):
    """Each used to pass every check and skew or break the run later (after prepare or Step 1)."""
    no_optimizer = json.loads((REPO / "ds_configs/cpu_fp32.json").read_text())
    no_optimizer.pop("optimizer")
    (tmp_path / "no_optimizer.json").write_text(json.dumps(no_optimizer))
    typo = json.loads((REPO / "ds_configs/cpu_fp32.json").read_text())
    typo["train_batch_sise"] = typo.pop("train_batch_size", 32)
    (tmp_path / "typo.json").write_text(json.dumps(typo))
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("eins zwei drei\nvier fünf\nsechs\n")
    junk = tmp_path / "junk.tsv"  # well formed, but no pair's English word is in the English corpus
    junk.write_text("".join(f"xq{i}\tzz{i}\n" for i in range(20000)))
    german = str(REPO / "demo_data/corpus/de.txt")
    for changes, message in [
            ({"step1__steps": 10**30}, "step1: steps must be less than or equal to 1000000000"),
            ({"step1__ds_config": str(tmp_path / "no_optimizer.json")}, "no optimizer section"),
            ({"step1__ds_config": str(tmp_path / "typo.json")},
             "'train_batch_sise' is not a DeepSpeed key .* did you mean 'train_batch_size'"),
            ({"targets": [{"lang": "de", "corpus": str(tiny)}]},
             "tiny.txt: 25 characters, too little text for static vectors .* de's init focus"),
            ({"step2__init": "wechsel", "targets": [{"lang": "de", "corpus": german, "word_list": str(junk)}]},
             "junk.tsv: only 0 of its 20,000 pairs have a source word found in")]:
        path = pipeline_config(tmp_path, **changes)
        with pytest.raises(InputError, match=message):
            Pipeline(PipelineConfig.load(path), str(path))


def test_a_pipeline_continues_only_a_folder_its_mark_names_never_one_of_the_same_shape(tmp_path, folders):
    """Issue 49: a user's folder holding results.json, results.csv, data/ and logs/ used to be taken for a
    pipeline's (by its shape) and its results replaced."""
    from ds_minimodel.pipeline.ownership import OWNER_MARK, is_pipeline_output, own_output

    out = tmp_path / "out"
    for name in ("data", "logs", "step1"):
        (out / name).mkdir(parents=True)
    for name in ("results.json", "results.csv"):
        (out / name).write_text("the user's own")
    assert not is_pipeline_output(out)
    with pytest.raises(InputError, match=f"^p.json: out {out} already holds .* {OWNER_MARK}"):
        own_output(out, "p.json")
    with pytest.raises(InputError, match=f"^p.json: out {out / 'results.json'} names an existing file, not a folder; "
                                         "choose another out$"):
        own_output(out / "results.json", "p.json")
    assert sorted(p.name for p in out.iterdir()) == ["data", "logs", "results.csv", "results.json", "step1"]
    (out / OWNER_MARK).write_text("made by a pipeline")
    own_output(out, "p.json")
    assert not is_pipeline_output(folders["run"]) and not is_pipeline_output(folders["data"])


def test_a_script_claims_a_pipelines_folder_before_linking_finished_steps_into_it(tmp_path, capsys):
    """scripts/reference_wechsel.sh links another run's Steps 1-3 into its out folder; linked first, the folder had
    the shape of a pipeline's but not its mark, and the pipeline refused it. The script claims it first."""
    from ds_minimodel.pipeline.ownership import OWNER_MARK, is_pipeline_output, main

    assert main([str(tmp_path / "new"), "c.json"]) == 0 and is_pipeline_output(tmp_path / "new")
    assert "c.json" in (tmp_path / "new" / OWNER_MARK).read_text()
    (tmp_path / "new" / "step1").symlink_to(tmp_path)  # what the script links in next; claimed again on a re-run
    assert main([str(tmp_path / "new"), "c.json"]) == 0
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's")
    assert main([str(tmp_path / "mine"), "c.json"]) == 2
    assert f"error: c.json: out {tmp_path / 'mine'} already holds 1 other entry (notes.txt)" in capsys.readouterr().err
    assert not is_pipeline_output(tmp_path / "mine")
    script = (Path(__file__).resolve().parents[2] / "scripts/reference_wechsel.sh").read_text()
    assert script.index("ds_minimodel.pipeline.ownership") < script.index("ln -s")


def test_a_job_or_language_the_plan_does_not_have_is_refused_before_the_folder_is_claimed(tmp_path, capsys):
    from ds_minimodel.pipeline.command import main as pipeline_main

    path = pipeline_config(tmp_path)
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        assert pipeline_main(["--config", str(path), "--only", "step9"]) == 2
        assert "no job 'step9' in this pipeline; its jobs are prepare, step1-base" in capsys.readouterr().err
        assert pipeline_main(["--config", str(path), "--only", "step2-bl_base", "--lang", "fr"]) == 2
        assert "step2-bl_base runs for de; not for 'fr'" in capsys.readouterr().err
        assert pipeline_main(["--config", str(path), "--list", "--only", "step9"]) == 2  # --list reads --only too
        assert "no job 'step9'" in capsys.readouterr().err
        assert pipeline_main(["--config", str(path), "--list", "--only", "step4"]) == 0
        assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["step4"]
        # No task: nothing to finetune or score, so no Step-3 or Step-4 job (not jobs listed as done).
        path = pipeline_config(tmp_path, tasks=[])
        assert pipeline_main(["--config", str(path), "--list"]) == 0
        *listed, why = capsys.readouterr().out.splitlines()
        listed = [line.split()[0] for line in listed]
        assert listed[-4:] == [f"step2-{s}" for s in ("bl_base", "bl_small", "minijoint", "minipost")], listed
        assert why == (f"(no Step 3 or Step 4: {path} names no task; the run ends with each language's embeddings, "
                       "its Step-2 checkpoints)")
        assert pipeline_main(["--config", str(path), "--only", "step3-base"]) == 2
        assert "no job 'step3-base' in this pipeline (it names no task: Steps 3 and 4 have nothing to do)" in (
            capsys.readouterr().err)
    finally:
        os.chdir(cwd)
    assert not (tmp_path / "out").exists()  # not even the pipeline's mark


def test_a_folder_of_a_users_own_files_is_never_a_pipelines_and_its_files_survive(tmp_path, capsys):
    """Issue 30's data loss: a pipeline given a folder holding the user's own results.json used to run and replace
    it. Now it is refused before any work, and the file is untouched; the folders a pipeline made are marked as its
    own before anything else is written, and continued later."""
    from ds_minimodel.pipeline.command import main as pipeline_main
    from ds_minimodel.pipeline.ownership import OWNER_MARK, is_pipeline_output

    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "mine"
    out.mkdir()
    (out / "results.json").write_text('{"mine": true}')
    config = json.loads((repo / "configs/demo.json").read_text())
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**config, "out": str(out)}))
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        assert pipeline_main(["--config", str(path), "--list"]) == 2  # not listed as a pipeline's with jobs to run
        listed = capsys.readouterr()
        assert pipeline_main(["--config", str(path), "--only", "step4"]) == 2
    finally:
        os.chdir(cwd)
    assert not listed.out and listed.err.startswith(f"error: {path}: out {out} already holds")
    err = capsys.readouterr().err
    assert f"{path}: out {out} already holds" in err and "choose another out" in err
    assert (out / "results.json").read_text() == '{"mine": true}' and sorted(os.listdir(out)) == ["results.json"]
    assert not is_pipeline_output(out)
    (out / OWNER_MARK).write_text("made by a pipeline")
    assert is_pipeline_output(out)


def test_misleading_messages_say_what_is_wrong(tmp_path, folders, capsys):
    """Issue 30, item 5: each used to name another problem than the real one, or print more than one line."""
    import datetime

    import torch

    from ds_minimodel.tasks import baselines, evaluate

    def one_line(code: int) -> str:
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1, err
        return err

    # A folder where a file belongs: named as such, not as missing or as a file type ''.
    assert f"{tmp_path}: a folder, not a corpus file" in one_line(
        prepare.main(["--corpus", str(tmp_path), "--out", str(tmp_path / "d")]))
    assert f"{tmp_path}: a folder, not a task file" in one_line(
        evaluate.main(["--task-model", str(folders["model"]), "--test", str(tmp_path), "--lang", "de"]))
    # XNLI's files hold every language: baselines can be told which.
    xnli = str(FIXTURES / "xnli.dev.tsv")
    assert baselines.main(["--format", "xnli", "--train", xnli, "--language", "en", xnli]) == 0
    assert f"{xnli}: majority " in capsys.readouterr().out
    # A weights file holding more than tensors: one line with the reason, no advice to load it unsafely.
    bad = tmp_path / "bad"
    checkpoint.save_model_folder(bad, {"w": torch.zeros(1)}, {})
    torch.save({"w": torch.zeros(1), "when": datetime.datetime(2026, 1, 1)}, bad / "model.pt")
    meta = json.loads((bad / "meta.json").read_text())
    meta.pop("files")
    (bad / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(InputError) as err:
        checkpoint.load_weights(bad)
    message = str(err.value)
    assert len(message.splitlines()) == 1 and "weights_only=False" not in message and "()" not in message
    assert message.startswith(f"{bad / 'model.pt'}: refused: not loadable without running code from it (")
    # Several embeddings: all read and checked before the first score (issue 49: a bad third one used to be found
    # after two records were printed); another width is named as such, and so are embeddings of another language
    # than --lang (the record would have named the wrong one).
    from ds_minimodel.model.surgery import save_embeddings

    model_meta = checkpoint.load_meta(folders["model"])
    hidden = model_meta.model_config["hidden_size"]
    good = {"primary_sha256": model_meta.lineage, "tokenizer": {"path": "spm.model", "sha256": "0"}, "lang": "de"}
    for name, width, meta in (("a", hidden, good), ("b", hidden, good), ("wide", 1024, good),
                              ("french", hidden, {**good, "lang": "fr"}), ("damaged", hidden, good)):
        save_embeddings(tmp_path / name, torch.zeros(100, width), torch.zeros(100), meta)
    weights = tmp_path / "damaged" / checkpoint.WEIGHTS
    weights.write_bytes(weights.read_bytes()[:-10])
    for third, message in (("wide", f"{tmp_path / 'wide'}: embeddings 1024 wide do not fit"),
                           ("french", f"{tmp_path / 'french'}: embeddings learned for 'fr', but --lang is 'de'"),
                           ("damaged", f"{tmp_path / 'damaged'}")):
        code = evaluate.main(["--task-model", str(folders["model"]), "--embeddings", str(tmp_path / "a"),
                              str(tmp_path / "b"), str(tmp_path / third), "--test", str(FIXTURES / "generic.jsonl"),
                              "--lang", "de"])
        assert message in one_line(code)
        assert capsys.readouterr().out == ""


def test_a_pipeline_with_no_target_language_is_refused_before_any_work(tmp_path):
    path = pipeline_config(tmp_path, targets=[])
    with pytest.raises(InputError, match="targets is empty: name at least one target language"):
        Pipeline(PipelineConfig.load(path), str(path))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("world_size", [1, 2, 8])
def test_a_valid_deepspeed_json_passes_the_check_on_any_number_of_ranks(world_size, monkeypatch):
    """DeepSpeed's config class reads the world size from the process group where one exists (Step 3 checks after
    joining it): the check must not mistake the global batch for one rank's."""
    from deepspeed.runtime import config as ds_runtime_config

    from ds_minimodel.train.ds_validate import check_ds_config

    monkeypatch.setattr(ds_runtime_config.dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(ds_runtime_config.dist, "get_world_size", lambda *a, **k: world_size)
    shipped = sorted((REPO / "ds_configs").glob("*.json"))
    assert len(shipped) >= 10
    for path in shipped:  # every shipped file passes
        check_ds_config(load_ds_config(path), path.name, steps=10)


@pytest.mark.parametrize("changes, message", [
    ({"targets": [{"lang": "../../evil", "corpus": "demo_data/corpus/de.txt"}]},
     r"language name '../../evil' is not a plain name .*: it names folders under out"),
    ({"tasks__name": "../x"}, r"task name '../x' is not a plain name"),
    ({"targets": [{"lang": "de", "corpus": "demo_data/corpus/de.txt"}] * 2},
     r"language 'de' is named twice: every record would count twice"),
    ({"targets": [{"lang": "en", "corpus": "demo_data/corpus/de.txt"}]},
     r"language 'en' is named twice \(a target language that is the source language\)"),
    ({"step3__seeds": [1, 1]}, r"step3.seeds \[1, 1\] names a seed twice"),
])
def test_names_that_become_folders_and_duplicates_are_refused_when_the_config_is_read(changes, message, tmp_path):
    if "tasks__name" in changes:
        task = json.loads((REPO / "configs/demo.json").read_text())["tasks"][0]
        changes = {"tasks": [{**task, "name": changes["tasks__name"]}]}
    path = pipeline_config(tmp_path, **changes)
    with pytest.raises(InputError, match=message):
        PipelineConfig.load(path)


def test_align_and_probe_refuse_bad_options_with_one_line(tmp_path, folders, capsys):
    """Issue 49: align's default --max-len 128 over a 64-position model, and a folder or missing file as its input,
    were tracebacks; probe --blocks 0 or -4 was accepted."""
    from ds_minimodel.tools import align, probe

    def one_line(code: int) -> str:
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1, err
        return err

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"id": i, "text": f"sentence {i}"}) + "\n" for i in range(4)))
    common = ["--model", str(folders["model"]), "--embeddings", str(tmp_path / "e")]
    positions = checkpoint.load_meta(folders["model"]).model_config["max_positions"]
    for argv, message in (
            ([*common, "--source", str(tmp_path), "--target", str(pairs)], f"{tmp_path}: a folder, not a file"),
            ([*common, "--source", str(pairs), "--target", str(tmp_path / "none")],
             "none: file of sentences not found (--target)"),
            ([*common, "--source", str(pairs), "--target", str(pairs), "--max-len", str(positions + 1)],
             f"--max-len {positions + 1} exceeds the {positions} positions of {folders['model']}")):
        assert message in one_line(align.main(argv))
    for blocks in ("0", "-4"):
        assert f"--blocks must be at least 1, got {blocks}" in one_line(
            probe.main(["--model", str(folders["model"]), "--data", str(folders["data"]), "--blocks", blocks]))


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a read-only or a tiny tmpfs needs root")
@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_a_read_only_or_full_disk_is_one_line_naming_the_path(tmp_path, fault):
    """Issue 49: prepare, run_pretrain and the pipeline died with OSError tracebacks (errno 30, 28)."""
    data = tmp_path / "data"  # prepared where it can be written, for run_pretrain to read
    prepare.main(["--corpus", str(REPO / "demo_data/corpus/de.txt"), "--out", str(data), "--vocab-size", "500",
                  "--no-progress"])
    disk = tmp_path / "disk"
    disk.mkdir()
    options = "ro,size=1m" if fault == "read-only" else "size=64k"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(disk)], check=True, capture_output=True)
    try:
        # No rank or rendezvous variables an in-process test may have set (a fixed MASTER_PORT may be taken).
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                                 "MASTER_PORT")}
        env["DS_ACCELERATOR"] = "cpu"
        config = tmp_path / "p.json"
        config.write_text(json.dumps({**json.loads((REPO / "configs/demo.json").read_text()),
                                      "out": str(disk / "out")}))
        commands = [[sys.executable, "-m", "ds_minimodel", "prepare", "--corpus",
                     str(REPO / "demo_data/corpus/de.txt"), "--out", str(disk / "d"), "--vocab-size", "500",
                     "--no-progress"],
                    [sys.executable, "-m", "ds_minimodel", "pipeline", "--config", str(config), "--only", "prepare"]]
        if fault == "read-only":  # a full disk in a checkpoint write: test_reliability.py
            commands.append([sys.executable, "run_pretrain.py", "--ds-config", "ds_configs/cpu_fp32.json", "--data",
                             str(data), "--out", str(disk / "run"), "--preset", "tiny", "--seq-len", "64", "--steps",
                             "4"])
        for cmd in commands:
            proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
            err = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
            assert proc.returncode == 1 and len(err) == 1 and "Traceback" not in proc.stderr, (cmd, proc.stderr[-3000:])
            assert str(disk) in err[0] and ("read-only" in err[0] if fault == "read-only" else "no space" in err[0])
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True, check=False)
