"""Batch arithmetic and DeepSpeed-config checks (no process group needed)."""
import json
from pathlib import Path

import pytest

from ds_minimodel.ds_config import BatchSizes, half_precision, load_ds_config, resolve_batch, unchecked_bf16, uses_bf16
from ds_minimodel.errors import InputError


def test_derives_the_missing_batch_number():
    assert resolve_batch({"train_batch_size": 2048, "train_micro_batch_size_per_gpu": 16}, 64,
                         source="x") == BatchSizes(micro=16, accumulation=2, world_size=64)
    assert resolve_batch({"train_batch_size": 2048, "gradient_accumulation_steps": 4}, 16,
                         source="x") == BatchSizes(micro=32, accumulation=4, world_size=16)
    sizes = resolve_batch({"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2}, 4, source="x")
    assert sizes.global_batch == 64


@pytest.mark.parametrize("config, world, message", [
    ({"train_batch_size": 2048, "train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 2}, 48,
     "train_batch_size 2048 != train_micro_batch_size_per_gpu 16 x gradient_accumulation_steps 2 x world size 48 "
     "= 1536"),
    ({"train_batch_size": 2048, "train_micro_batch_size_per_gpu": 24}, 8,
     "train_batch_size 2048 is not divisible by train_micro_batch_size_per_gpu 24 x world size 8 = 192"),
    ({"train_batch_size": 100, "gradient_accumulation_steps": 3}, 2,
     "train_batch_size 100 is not divisible by gradient_accumulation_steps 3 x world size 2 = 6"),
    ({"train_batch_size": 8}, 1, "give at least two of"),
])
def test_batch_disagreements_name_the_numbers(config, world, message):
    with pytest.raises(InputError) as err:
        resolve_batch(config, world, source="ds_configs/x.json")
    assert "ds_configs/x.json" in str(err.value) and message in str(err.value)


def test_ds_config_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"train_batch_size": 32,, }')
    with pytest.raises(InputError, match=f"{bad}: not valid JSON"):
        load_ds_config(bad)
    bad.write_text(json.dumps({"train_batch_size": "32"}))
    with pytest.raises(InputError, match="train_batch_size must be a positive integer"):
        load_ds_config(bad)
    with pytest.raises(InputError, match="file not found"):
        load_ds_config(tmp_path / "missing.json")


def test_fp16_under_zero_stage_0_is_refused_with_the_reason(tmp_path):
    # DeepSpeed 0.19's stage-0 fp16 optimizers divide gradients by a loss scale engine.backward() never applied.
    for zero in ({}, {"zero_optimization": {"stage": 0}}):
        path = tmp_path / "fp16.json"
        path.write_text(json.dumps({"train_batch_size": 4, "fp16": {"enabled": True}, **zero}))
        with pytest.raises(InputError, match=rf"{path}: fp16 needs ZeRO stage 1 or higher.*silently stalls"):
            load_ds_config(path)
    path.write_text(json.dumps({"train_batch_size": 4, "fp16": {"enabled": True}, "zero_optimization": {"stage": 1}}))
    assert load_ds_config(path)["zero_optimization"] == {"stage": 1}
    path.write_text(json.dumps({"train_batch_size": 4, "bf16": {"enabled": True}}))  # bf16 has no loss scale
    assert load_ds_config(path)["bf16"] == {"enabled": True}


def test_bf16s_overflow_check_setting_must_be_a_json_boolean(tmp_path):
    # The loop guards saves when the check is off (train.engine); a string DeepSpeed would read as false must not
    # slip past that guard.
    path = tmp_path / "bf16.json"
    path.write_text(json.dumps({"train_batch_size": 4, "bf16": {"enabled": True, "check_grad_overflow": "false"}}))
    with pytest.raises(InputError, match=rf"{path}: bf16.check_grad_overflow must be true or false, got 'false'"):
        load_ds_config(path)
    path.write_text(json.dumps({"train_batch_size": 4, "bf16": {"enabled": True, "check_grad_overflow": False}}))
    assert load_ds_config(path)["bf16"]["check_grad_overflow"] is False


def test_bf16s_old_name_is_read_as_deepspeed_reads_it(tmp_path):
    # DeepSpeed reads "bfloat16" where "bf16" is absent; a run configured by the old name is a bf16 run here too
    # (its checkpoints keep frozen parameters at full precision, its overflow-check setting is checked).
    path = tmp_path / "bfloat16.json"
    path.write_text(json.dumps({"train_batch_size": 4, "bfloat16": {"enabled": True, "check_grad_overflow": False}}))
    config = load_ds_config(path)
    assert uses_bf16(config) and half_precision(config) and unchecked_bf16(config)
    assert not uses_bf16({"bf16": {"enabled": False}, "bfloat16": {"enabled": True}})  # bf16 wins, as in DeepSpeed
    path.write_text(json.dumps({"train_batch_size": 4, "bfloat16": {"enabled": True, "check_grad_overflow": 0}}))
    with pytest.raises(InputError, match="check_grad_overflow must be true or false, got 0"):
        load_ds_config(path)


@pytest.mark.parametrize("key", ["fp16", "bf16", "bfloat16"])
def test_a_precision_section_that_is_not_an_object_is_named(tmp_path, key):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 4, key: True}))
    with pytest.raises(InputError, match=rf'{path}: {key} must be an object such as {{"enabled": true}}, got True'):
        load_ds_config(path)


DS_CONFIGS = Path(__file__).resolve().parents[2] / "ds_configs"


@pytest.mark.parametrize("name", sorted(p.name for p in DS_CONFIGS.glob("*.json")))
def test_shipped_configs_parse_and_fit_their_clusters(name):
    config = load_ds_config(DS_CONFIGS / name)
    if name.startswith("finetune") or name == "cpu_bf16_finetune.json":
        assert resolve_batch(config, 1, source=name).global_batch == 32
        if name.startswith("finetune"):  # the paper's Step 3 on a node of eight GPUs (configs/paper.json)
            assert resolve_batch(config, 8, source=name) == BatchSizes(micro=4, accumulation=1, world_size=8)
    elif name in ("cpu_bf16_reference.json", "cpu_fp32_reference.json"):  # the CPU reference: 64 over 2 ranks
        assert resolve_batch(config, 2, source=name).global_batch == 64
    elif name == "gpu_bf16_reference.json":  # the GPU reference experiment: 256 sequences on one GPU
        assert resolve_batch(config, 1, source=name).global_batch == 256
    elif name == "gpu_bf16_finetune.json":  # Step 3 of the GPU reference: 128 rows, chosen on English dev
        assert resolve_batch(config, 1, source=name).global_batch == 128
    elif name.startswith(("v100", "bf16")):  # the paper's global batch of 2,048 on 64 GPUs
        assert resolve_batch(config, 64, source=name).global_batch == 2048
        assert config["scheduler"]["params"]["total_num_steps"] == 125_000
        assert config["scheduler"]["params"]["warmup_num_steps"] == 10_000
        assert config["optimizer"]["params"]["lr"] == 7e-4
    else:
        assert resolve_batch(config, 2, source=name).global_batch == 32


def test_the_fp32_reference_recipe_is_the_bf16_one_but_for_precision():
    # For CPUs without native bf16 (emulated bf16 matrix products there run many times slower than fp32): the same
    # run otherwise, so that a rebuild on such a machine changes the numbers' rounding, not the recipe.
    bf16, fp32 = (json.loads((DS_CONFIGS / f"cpu_{kind}_reference.json").read_text()) for kind in ("bf16", "fp32"))
    assert bf16.pop("bf16") == {"enabled": True} and fp32 == bf16


def test_auto_schedule_lengths_follow_the_run():
    from ds_minimodel.ds_config import fill_schedule

    config = {"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": "auto",
                                                               "total_num_steps": "auto", "warmup_max_lr": 1e-3}}}
    filled = fill_schedule(config, 1500, 0.08)
    assert filled["scheduler"]["params"] == {"warmup_num_steps": 120, "total_num_steps": 1500, "warmup_max_lr": 1e-3}
    assert config["scheduler"]["params"]["total_num_steps"] == "auto"  # the caller's dict is not changed
    assert fill_schedule(config, 10, 0.01)["scheduler"]["params"]["warmup_num_steps"] == 1  # never 0
    fixed = {"scheduler": {"params": {"warmup_num_steps": 10_000, "total_num_steps": 125_000}}}
    assert fill_schedule(fixed, 50, 0.5) == fixed
    assert fill_schedule({}, 50, 0.5) == {}


def test_an_output_folder_that_holds_another_run_is_refused(tmp_path):
    from ds_minimodel.train.run_record import write_run_description

    run = tmp_path / "run"
    description = {"variant": "base", "seed": 1, "seq_len": 64, "data": "/data/en"}
    write_run_description(run, description, resume=False)
    before = (run / "run.json").read_text()
    with pytest.raises(InputError, match=r"already holds a run .*pass --resume to continue it, or choose another"):
        write_run_description(run, description, resume=False)
    with pytest.raises(InputError, match="settings that differ from the run in this folder: data, seed"):
        write_run_description(run, {**description, "seed": 2, "data": "/data/de"}, resume=True)
    write_run_description(run, description, resume=True)  # the same run: fine
    assert (run / "run.json").read_text() == before  # nothing rewritten by a refused call


def test_a_run_recorded_before_a_setting_existed_resumes_with_its_default(tmp_path):
    """Runs written before pre_norm (model config), --init (Step 2) and --packing existed resume as what they were."""
    from ds_minimodel.config import get_preset
    from ds_minimodel.train.run_record import write_run_description

    run = tmp_path / "run"
    model = get_preset("tiny").to_dict()
    old = {k: v for k, v in model.items() if k != "pre_norm"}
    write_run_description(run, {"variant": "bl_base", "model": old, "seed": 1}, resume=False)
    write_run_description(run, {"variant": "bl_base", "model": model, "init": "overlap", "seed": 1,
                                "packing": "sentences"}, resume=True)
    with pytest.raises(InputError, match="differ from the run in this folder: packing"):  # other samples, not resumed
        write_run_description(run, {"variant": "bl_base", "model": model, "seed": 1, "packing": "blocks"}, resume=True)
    with pytest.raises(InputError, match="differ from the run in this folder: init, model"):
        write_run_description(run, {"variant": "bl_base", "model": {**model, "pre_norm": True}, "init": "specials",
                                    "seed": 1}, resume=True)


def test_resume_with_another_training_setup_is_refused_unless_allowed_and_then_recorded(tmp_path):
    """Issue 30: --resume used to continue at a changed learning rate while run.json kept the old one."""
    from ds_minimodel.train.run_record import write_run_description

    run = tmp_path / "run"
    setup = {"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    description = {"variant": "base", "seed": 1, "ds_config": setup, "train": {"steps": 10, "log_every": 5}}
    write_run_description(run, description, resume=False)
    before = (run / "run.json").read_text()
    faster = {**description, "ds_config": {"optimizer": {"type": "AdamW", "params": {"lr": 2e-3}}}}
    with pytest.raises(InputError, match=r"training setup that differs from the run's: ds_config.optimizer.params.lr "
                                         r"0.001 -> 0.002\. Pass --allow-config-change"):
        write_run_description(run, faster, resume=True)
    assert (run / "run.json").read_text() == before
    # How often a run logs or saves is not what it learns: no option needed, nothing recorded.
    write_run_description(run, {**description, "train": {"steps": 10, "log_every": 1}}, resume=True)
    assert (run / "run.json").read_text() == before
    # Nor is how long it goes on: a resumed run is extended with a larger --steps.
    write_run_description(run, {**description, "train": {"steps": 20, "log_every": 5}}, resume=True)
    assert (run / "run.json").read_text() == before
    write_run_description(run, {**faster, "train": {"steps": 20, "log_every": 5, "warmup_ratio": 0.1}},
                          resume=True, allow_config_change=True)
    record = json.loads((run / "run.json").read_text())
    assert record["ds_config"] == faster["ds_config"] and record["train"]["warmup_ratio"] == 0.1
    assert record["changes"][0]["changed"] == {"ds_config.optimizer.params.lr": [1e-3, 2e-3],
                                               "train.warmup_ratio": [None, 0.1]}
    with pytest.raises(InputError, match="settings that differ from the run in this folder: seed"):
        write_run_description(run, {**faster, "seed": 2}, resume=True, allow_config_change=True)


@pytest.mark.parametrize("text, lost", [
    ("Application timeout caused pair closure", True),  # Gloo, a SIGSTOPped peer during a checkpoint's all-reduce
    ("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.231.67.2]:4711", True),
    ("[c10d] Timed out waiting 20000ms for recv operation to complete", True),
    ("mat1 and mat2 shapes cannot be multiplied (16x64 and 32x64)", False),
    ("unexpected pos 1024 vs 512", False),  # torch.save on a full disk: a write failure, not a lost peer
])
def test_lost_peer_errors_are_told_from_other_runtime_errors(text, lost):
    from ds_minimodel.train.faults import lost_a_peer

    assert lost_a_peer(RuntimeError(text)) is lost


def test_an_updates_figures_are_reduced_in_one_all_reduce_the_same_on_every_rank():
    """train.metrics.reduce_update on a one-rank Gloo group in this process: loss sums averaged over the micro-batches
    (and ranks), tokens summed, a stop request passed on."""
    import torch
    import torch.distributed as dist

    from ds_minimodel.cluster.launch import free_port
    from ds_minimodel.train.metrics import reduce_update

    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        batch = BatchSizes(micro=4, accumulation=2, world_size=1)
        stats = reduce_update({"loss_main": torch.tensor(2.0), "loss": torch.tensor(3.0)}, 7, True, batch)
        assert stats.losses == {"loss": 1.5, "loss_main": 1.0} and stats.tokens == 7 and stats.stop is True
        assert reduce_update({"loss": torch.tensor(1.0)}, 3, False, batch).stop is False
    finally:
        if started:
            dist.destroy_process_group()


def test_deepspeeds_inference_comm_op_is_not_built_for_training_on_cpu(monkeypatch):
    """On the CPU accelerator the shared-memory op that only tensor-parallel inference uses is marked incompatible,
    so init_distributed neither compiles nor loads it (the end to end checks, an empty extension cache staying empty
    through a launch and through build_engine over a group a script started: tests/integration/test_pretrain.py,
    test_bench.py)."""
    import deepspeed.ops
    from deepspeed.comm.torch import build_shm_op

    from ds_minimodel.train.distributed import skip_inference_comm_op

    monkeypatch.setitem(deepspeed.ops.__compatible_ops__, "deepspeed_shm_comm", True)
    assert skip_inference_comm_op() == "deepspeed_shm_comm"
    assert deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] is False
    assert build_shm_op() is None  # what DeepSpeed's CPU backend calls in init_distributed: no build, no load
