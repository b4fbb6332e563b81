"""Step 1 end to end: the real run_pretrain.py, plain and under the deepspeed launcher with 2 CPU ranks; and Step 1b
(run_minipost.py), whose new layers must bridge the cut."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from ds_minimodel.data.streams import MLMBatchStream, PackedDataset, TokenShards
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.model.losses import mlm_step
from ds_minimodel.model.transforms import build_minipost
from ds_minimodel.stages.specs import PretrainSpec
from tests.integration.conftest import REPO, deepspeed_cmd, fork_cmd, run_cmd, small_batch

TINY = ["--preset", "tiny", "--seq-len", "64", "--ds-config", "ds_configs/cpu_fp32.json"]


def pretrain_cmd(num_ranks: int, *args: str) -> list[str]:
    """One process, or ranks forked by the fork launcher: the deepspeed launcher costs about 14 s of CPU more a
    2-rank run (two more interpreters importing DeepSpeed, and each rank its own imports), and runs here only where it
    is what is tested."""
    if num_ranks == 1:
        return [sys.executable, "run_pretrain.py", *args]
    return fork_cmd(num_ranks, "run_pretrain.py", *args)


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_minijoint_two_ranks_both_heads_learn(en_data, tmp_path):
    # A fixed schedule (20 warm-up updates of 1,000) rather than the shipped "auto" one, which would decay the rate
    # to 0 over these 40 updates: the question here is whether both heads learn, not how a short schedule ends.
    config = json.loads((REPO / "ds_configs/cpu_fp32.json").read_text())
    config["scheduler"]["params"].update(warmup_num_steps=20, total_num_steps=1000)
    ds_config = tmp_path / "ds.json"
    ds_config.write_text(json.dumps(config))
    out = tmp_path / "minijoint"
    # An empty extension cache stays empty: on CPU nothing is compiled (DeepSpeed's shared-memory op, which only
    # tensor-parallel inference uses, is skipped), nothing is announced, no shared-memory buffer is left.
    extensions = tmp_path / "torch_extensions"
    cmd = deepspeed_cmd(2, "run_pretrain.py", "--variant", "minijoint", *TINY, "--ds-config", str(ds_config),
                        "--data", str(en_data), "--out", str(out), "--steps", "40", "--log-every", "5",
                        "--save-every", "20", "--aux-weight", "0.4")  # issue 46's lever; the paper's 0.5: unit tests
    proc = run_cmd(cmd, env={"TORCH_EXTENSIONS_DIR": str(extensions)})
    assert not extensions.exists() or not any(extensions.iterdir())
    assert "built successfully" not in proc.stdout + proc.stderr
    port = cmd[cmd.index("--master_port") + 1]
    assert not list(Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*"))
    records = read_metrics(out)
    assert [r["step"] for r in records] == list(range(5, 41, 5))
    for head in ("loss_main", "loss_aux"):
        first, last = records[0][head], records[-1][head]
        assert last < first - 1.0, f"{head} did not fall: {first:.3f} -> {last:.3f}"
    # loss is the heads' weighted sum (averaged over ranks and micro-batches the same way): to fp32's last digits,
    # where the mean would be 0.1 |main - aux| off
    for r in records:
        assert abs(r["loss"] - (0.6 * r["loss_main"] + 0.4 * r["loss_aux"])) < 2e-6 * r["loss"]
    assert max(abs(r["loss_main"] - r["loss_aux"]) for r in records) > 0.05
    assert json.loads((out / "run.json").read_text())["spec"]["aux_weight"] == 0.4
    # TensorBoard event files hold both heads' curves
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard" / "step1-minijoint"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"loss_main", "loss_aux", "loss", "lr", "tokens_per_s", "flops"} <= tags
    assert len(events.Scalars("loss_aux")) == len(records)
    meta = json.loads((out / "checkpoints/step_00000040/meta.json").read_text())
    assert meta["model_config"]["aux_head_layer"] == 4 and meta["global_batch"] == 32
    assert meta["samples"] == 40 * 32


@pytest.mark.parametrize("num_ranks", [2])  # one rank: test_reliability.py resumes after SIGKILL, SIGTERM, SIGUSR1
def test_resume_is_bitwise_identical(en_data, tmp_path, num_ranks):
    common = ["--variant", "minijoint", *TINY, "--data", str(en_data), "--save-every", "3", "--log-every", "1"]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    run_cmd(pretrain_cmd(num_ranks, *common, "--out", str(straight), "--steps", "6"))
    run_cmd(pretrain_cmd(num_ranks, *common, "--out", str(stopped), "--steps", "3"))
    run_cmd(pretrain_cmd(num_ranks, *common, "--out", str(stopped), "--steps", "6", "--resume"))
    a = torch.load(straight / "checkpoints/step_00000006/model.pt", weights_only=True)
    b = torch.load(stopped / "checkpoints/step_00000006/model.pt", weights_only=True)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs after resume"
    # the logged losses after the resume point match too, and no step is logged twice
    la, lb = read_metrics(straight), read_metrics(stopped)
    assert [r["step"] for r in lb] == list(range(1, 7))
    assert [r["loss"] for r in la] == [r["loss"] for r in lb]


def test_compiled_training_is_one_graph_and_its_checkpoints_resume_eagerly(en_data, tmp_path):
    # Three layers rather than tiny's twelve: Inductor's compile time grows with the layers it unrolls (about 60 s for
    # twelve on 2 CPU cores), and one graph over three layers with both heads asks the same questions.
    shallow = tmp_path / "model.json"
    shallow.write_text(json.dumps({"num_layers": 3}))
    # Blocks cut from the stream: every batch goes in without its attention mask, the compiled graph's only input
    # that differs from whole lines packed (whose every batch brings its mask; the forward test below has both).
    common = ["--variant", "minijoint", *TINY, "--model-config", str(shallow), "--aux-layer", "2", "--data",
              str(en_data), "--save-every", "3", "--log-every", "1", "--packing", "blocks"]
    out = tmp_path / "compiled"
    proc = run_cmd(pretrain_cmd(1, *common, "--out", str(out), "--steps", "3", "--compile"),
                   env={"TORCH_LOGS": "graph_breaks,recompiles"})
    # The whole forward is one graph, also across micro-batches with different numbers of masked tokens. (That it
    # computes what the eager forward does is the next test's question: compiled dropout draws other random bits.)
    assert "Graph break" not in proc.stderr and "Recompiling" not in proc.stderr, proc.stderr[-3000:]
    losses = [r["loss"] for r in read_metrics(out)]
    assert len(losses) == 3 and all(7.0 < x < 8.5 for x in losses), losses  # about ln(2,000) = 7.6 at the start
    assert json.loads((out / "run.json").read_text())["packing"] == "blocks"
    # compiled in place: the checkpoint has the usual names, and an eager run resumes from it
    run_cmd(pretrain_cmd(1, *common, "--out", str(out), "--steps", "6", "--resume"))
    first = torch.load(out / "checkpoints/step_00000003/model.pt", weights_only=True)
    last = torch.load(out / "checkpoints/step_00000006/model.pt", weights_only=True)
    assert first.keys() == last.keys() and not any(k.startswith("_orig_mod") for k in last)
    assert all(torch.isfinite(w).all() for w in last.values())


def test_the_compiled_forward_equals_the_eager_one():
    from ds_minimodel.config import get_preset
    from ds_minimodel.model.encoder import MaskedLM

    model = MaskedLM(get_preset("tiny").replace(vocab_size=300, num_layers=3, aux_head_layer=2)).eval()
    compiled = torch.compile(model)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):  # as engine.compile_model sets it
        check_against_eager(model, compiled)


def check_against_eager(model: torch.nn.Module, compiled: torch.nn.Module) -> None:
    # other numbers of masked tokens, padding, and no mask at all (packing "blocks": the MLM step passes none)
    for masked_share, padded in ((0.15, False), (0.3, True), (0.15, None)):
        ids = torch.randint(5, 300, (3, 32))
        attention = torch.ones(3, 32, dtype=torch.bool)
        if padded:
            attention[1, 20:] = False
        masked = (torch.rand(3, 32) < masked_share) & attention
        if padded is None:
            attention = None
        with torch.no_grad():
            want, got = model(ids, attention, masked), compiled(ids, attention, masked)
        assert want.keys() == got.keys()
        for head in want:
            torch.testing.assert_close(got[head], want[head], rtol=1e-4, atol=1e-5)


def test_batch_arithmetic_error_names_the_numbers(en_data, tmp_path):
    config = json.loads((REPO / "ds_configs/cpu_fp32.json").read_text())
    config.update(train_batch_size=48, train_micro_batch_size_per_gpu=16, gradient_accumulation_steps=2)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(config))
    proc = run_cmd(pretrain_cmd(1, "--preset", "tiny", "--seq-len", "64", "--ds-config", str(bad), "--data",
                                str(en_data), "--out", str(tmp_path / "run"), "--steps", "2"), check=False)
    assert proc.returncode == 2
    assert str(bad) in proc.stderr
    assert "train_batch_size 48 != train_micro_batch_size_per_gpu 16 x gradient_accumulation_steps 2 x world size 1" \
        in proc.stderr
    assert not (tmp_path / "run").exists()


def test_aux_weight_is_refused_by_a_one_head_variant_before_anything_is_written(en_data, tmp_path, monkeypatch):
    from ds_minimodel.errors import InputError
    from ds_minimodel.stages import pretrain

    monkeypatch.chdir(REPO)
    spec = PretrainSpec(variant="base", preset="tiny", seq_len=64, ds_config=Path("ds_configs/cpu_fp32.json"),
                        data=en_data, out=tmp_path / "base", steps=3, aux_weight=0.2)
    with pytest.raises(InputError, match="--aux-weight 0.2: the variant base has one MLM head"):
        pretrain.run(spec)
    assert not (tmp_path / "base").exists()


@pytest.mark.parametrize(("ds_config", "zero"), [("cpu_fp32.json", 0), ("cpu_bf16_zero2.json", 2),
                                                  ("cpu_bf16_zero2.json", 0)])
def test_active_forgetting_resets_embeddings_and_their_optimizer_state_at_multiples_of_k(en_data, tmp_path,
                                                                                        monkeypatch, ds_config, zero):
    """In process, one rank: after updates 3 and 6 of 8 the embeddings are the freshly drawn rows in the model and in
    DeepSpeed's fp32 master copy (bf16 keeps one: under ZeRO 2 in its shards, under ZeRO 0 in its optimizer
    wrapper), Adam's moments for them are zero and their group's step count restarts, while the body's optimizer
    state is kept; no reset at the last update."""
    from deepspeed.utils import safe_get_full_fp32_param

    from ds_minimodel.stages import pretrain
    from ds_minimodel.train import forgetting
    from ds_minimodel.train.checkpoint import unfused_masters

    seen = {}

    class Watched(forgetting.ActiveForgetting):
        def __call__(self, engine, step):
            super().__call__(engine, step)
            weight = engine.module.embeddings.tokens.weight
            base = getattr(engine.optimizer, "optimizer", engine.optimizer)
            states = [base.state[p] for g in base.param_groups for p in g["params"]]
            master = safe_get_full_fp32_param(weight)
            if master is None:
                master = next((m for p, m in unfused_masters(engine.optimizer) if p is weight), None)
            seen[step] = {"weight": weight.detach().float().clone(), "rows": self.rows(step, weight.shape),
                          "master": None if master is None else master.detach().clone(),
                          "moment": states[-1]["exp_avg"].detach().clone(),  # the embeddings' group alone
                          "body_moment": states[0]["exp_avg"].abs().sum().item(),
                          "step": float(states[-1]["step"]), "body_step": float(states[0]["step"])}

    monkeypatch.setattr(pretrain, "ActiveForgetting", Watched)
    monkeypatch.chdir(REPO)
    config = small_batch(ds_config, tmp_path)
    config.write_text(json.dumps({**json.loads(config.read_text()), "zero_optimization": {"stage": zero}}))
    pretrain.run(PretrainSpec(variant="minijoint", preset="tiny", seq_len=64, data=en_data, out=tmp_path / "run",
                              ds_config=config, steps=8, save_every=4, forget_every=3))
    bf16 = "bf16" in ds_config
    # bf16 under ZeRO 0: DeepSpeed's FP16_UnfusedOptimizer takes one step with zero gradients when it is built (to
    # make Adam's state), so the body's step count runs one ahead of the updates.
    ahead = 1 if bf16 and zero == 0 else 0
    for step, s in seen.items():
        reset = step in (3, 6)
        drawn = s["rows"].to(torch.bfloat16).float() if bf16 else s["rows"]
        assert torch.equal(s["weight"], drawn) == reset, step
        if bf16:  # the master copy holds the drawn rows in full precision
            assert torch.equal(s["master"], s["rows"]) == reset, step
        assert (not s["moment"].any()) == reset and (s["step"] == 0) == reset, step
        assert s["body_moment"] > 0 and s["body_step"] == step + ahead  # the body's state is never cleared
    meta = json.loads((tmp_path / "run/checkpoints/step_00000008/meta.json").read_text())
    assert meta["forget_every"] == 3
    description = json.loads((tmp_path / "run/run.json").read_text())
    assert description["forget_every"] == 3


def test_active_forgetting_resumes_exactly_across_a_reset(en_data, tmp_path):
    bf16 = small_batch("cpu_bf16_zero2.json", tmp_path)
    common = ["--variant", "minijoint", *TINY, "--ds-config", str(bf16), "--data", str(en_data), "--save-every", "3",
              "--log-every", "1", "--forget-every", "2"]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    run_cmd(pretrain_cmd(2, *common, "--out", str(straight), "--steps", "6"))
    run_cmd(pretrain_cmd(2, *common, "--out", str(stopped), "--steps", "3"))
    run_cmd(pretrain_cmd(2, *common, "--out", str(stopped), "--steps", "6", "--resume"))
    a = torch.load(straight / "checkpoints/step_00000006/model.pt", weights_only=True)
    b = torch.load(stopped / "checkpoints/step_00000006/model.pt", weights_only=True)
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert [r["loss"] for r in read_metrics(straight)] == [r["loss"] for r in read_metrics(stopped)]
    # Resuming with another forgetting period would train a different model: refused.
    other = run_cmd(pretrain_cmd(1, *common[:-2], "--forget-every", "3", "--out", str(stopped), "--steps", "6",
                                 "--resume"), check=False)
    assert other.returncode != 0 and "forget_every" in other.stderr


def test_a_refused_run_leaves_its_folder_as_it_was_and_a_changed_rate_needs_saying(en_data, tmp_path, monkeypatch):
    """Issue 30, in process: a run refused for too little data used to leave run.json behind, so the corrected
    command was refused too; --resume with another learning rate continued at it while run.json kept the old one."""
    from ds_minimodel.errors import InputError
    from ds_minimodel.stages import pretrain

    monkeypatch.chdir(REPO)
    config = json.loads((REPO / "ds_configs/cpu_fp32.json").read_text())

    def ds_json(name: str, **changes) -> Path:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({**config, **changes}))
        return path

    out = tmp_path / "run"
    spec = PretrainSpec(preset="tiny", seq_len=64, data=en_data, out=out, save_every=2, steps=2,
                        ds_config=Path("ds_configs/cpu_fp32.json"))
    huge = ds_json("huge", train_batch_size=1 << 20, train_micro_batch_size_per_gpu=1 << 20)
    with pytest.raises(InputError, match=r"but one step needs micro_batch_size x world_size = 1048576"):
        pretrain.run(spec.replace(ds_config=huge))
    assert not out.exists()
    pretrain.run(spec)
    recorded = (out / "run.json").read_bytes()
    faster = ds_json("faster", optimizer={**config["optimizer"], "params": {**config["optimizer"]["params"],
                                                                             "lr": 2e-3}})
    with pytest.raises(InputError, match=r"ds_config.optimizer.params.lr 0.001 -> 0.002"):
        pretrain.run(spec.replace(ds_config=faster, resume=True))
    assert (out / "run.json").read_bytes() == recorded
    pretrain.run(spec.replace(ds_config=faster, steps=4, resume=True, allow_config_change=True))
    record = json.loads((out / "run.json").read_text())
    assert record["ds_config"]["optimizer"]["params"]["lr"] == 2e-3
    assert record["changes"][0]["changed"]["ds_config.optimizer.params.lr"] == [1e-3, 2e-3]
    assert [r["step"] for r in read_metrics(out)][-1] == 4


def mlm_loss(model, data: Path, batches: int = 8) -> float:
    stream = MLMBatchStream(PackedDataset(TokenShards.open(data), 64), micro_batch_size=16, world_size=1, rank=0,
                            seed=123, vocab_size=model.cfg.vocab_size, seq_len=64)
    model.eval()
    with torch.no_grad():
        losses = [mlm_step(model, {k: torch.as_tensor(v) for k, v in next(stream).items()})["loss"].item()
                  for _ in range(batches)]
    return sum(losses) / batches


def successor_corpus(path: Path, seed: int = 0) -> Path:
    """Made-up words in chains where each word fixes the next: a masked word is predictable only from context.

    A tiny model learns this in a few hundred updates, whereas real text needs thousands to get past the unigram
    plateau, which is where a freshly cut mini-model and a trained one would look alike.
    """
    import random

    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "tu", "re", "sa", "no", "pi", "ve", "do", "gu", "fe"]
    words = sorted({"".join(rng.choice(syllables) for _ in range(3)) for _ in range(400)})[:200]
    successor = [(i * 37 + 11) % len(words) for i in range(len(words))]
    with open(path, "w") as f:
        for _ in range(3000):
            for _ in range(3):
                i, line = rng.randrange(len(words)), []
                for _ in range(rng.randint(8, 24)):
                    line.append(words[i])
                    i = successor[i]
                f.write(" ".join(line) + "\n")
            f.write("\n")
    return path


def test_minipost_step1b_bridges_the_cut(tmp_path):
    """Step 1b's new layers bridge layer N's output to the head (paper section 2.2): the mini-model's MLM loss falls
    from the freshly cut model's to the primary's, on a corpus where the primary has learned to use context."""
    from tests.integration.conftest import prepare

    data = prepare(successor_corpus(tmp_path / "chains.txt"), tmp_path / "chains", vocab_size=220)
    config = json.loads((REPO / "ds_configs/cpu_fp32.json").read_text())
    config["optimizer"]["params"]["lr"] = config["scheduler"]["params"]["warmup_max_lr"] = 3e-3
    (tmp_path / "ds.json").write_text(json.dumps(config))
    (tmp_path / "model.json").write_text(json.dumps({"num_layers": 6, "dropout": 0.0, "attention_dropout": 0.0}))
    common = ["--seq-len", "64", "--ds-config", str(tmp_path / "ds.json"), "--data", str(data),
              "--save-every", "1000", "--log-every", "50"]
    run_cmd(fork_cmd(1, "run_pretrain.py", "--variant", "base", "--preset", "tiny", "--model-config",
                     str(tmp_path / "model.json"), *common, "--out", str(tmp_path / "primary"), "--steps", "300"))
    primary_dir = tmp_path / "primary/checkpoints/step_00000300"
    run_cmd(fork_cmd(1, "run_minipost.py", "--from", str(primary_dir), *common,
                     "--out", str(tmp_path / "minipost"), "--steps", "100"))
    primary, _ = load_mlm(primary_dir)
    mini, _ = load_mlm(tmp_path / "minipost/checkpoints/step_00000100")
    fresh = build_minipost(primary, keep_layers=4, new_layers=2, seed=1)
    losses = {name: mlm_loss(model, data) for name, model in
              (("primary", primary), ("fresh cut", fresh), ("after Step 1b", mini))}
    print("MLM loss: " + ", ".join(f"{k} {v:.3f}" for k, v in losses.items()))
    assert losses["primary"] < 3.5, "the primary did not learn the chains; the comparison would be meaningless"
    # Measured (tiny, fp32, one rank, 2026-11-28): primary 3.044, fresh cut 3.155, after Step 1b 3.050 (on 2 ranks,
    # 2026-11-26: 3.030, 3.144, 3.035; one rank since, the same global batch in one process beside the suite). At
    # this scale the residual stream at layer 4 is already close to what the head expects, so the cut costs little;
    # Step 1b must recover all of it.
    assert losses["fresh cut"] > losses["primary"]
    assert losses["after Step 1b"] < losses["fresh cut"] - 0.05
    assert losses["after Step 1b"] <= losses["primary"] + 0.02
