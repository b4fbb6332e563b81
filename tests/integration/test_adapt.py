"""Mini-models and Step 2 end to end: MiniPost's Step 1b, adaptation of all four systems to German,
the frozen-body guarantees in process, and plugging embeddings into the primary model."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch

from ds_minimodel.errors import InputError
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.stages.specs import AdaptSpec
from ds_minimodel.train import checkpoint
from tests.integration.conftest import DEMO, REPO, fork_cmd, run_cmd, small_batch

# One xdist worker runs every test of the shared demo pipeline, so that it is trained once
# (scripts/test.sh runs 2 workers).
pytestmark = pytest.mark.xdist_group("demo_pipeline")


@pytest.fixture(scope="session")
def minipost(demo_pipeline) -> Path:
    """The pipeline's Step 1b: the normal primary's bottom layers + new ones, trained on English."""
    return checkpoint.latest_checkpoint(demo_pipeline["out"] / "step1b" / "minipost")


def copied_from_primary(names, keep: int) -> list[str]:
    """What Step 1b copies from the primary: the embeddings, the bottom ``keep`` layers and the MLM head."""
    return [k for k in names if k.startswith(("embeddings.", "heads.main.", *(f"layers.{i}." for i in range(keep))))]


def test_minipost_bottom_layers_bit_identical_to_primary(minipost, primaries, demo_pipeline):
    """The 2-rank Step 1b on real English text: everything copied from the primary is unchanged."""
    keep, new = demo_pipeline["settings"]["keep_layers"], demo_pipeline["settings"]["new_layers"]
    mini, meta = load_mlm(minipost)
    primary, primary_meta = load_mlm(primaries["base"])
    assert mini.cfg.num_layers == keep + new < primary.cfg.num_layers and meta.kind == "minipost-mini"
    assert meta.primary_sha256 == primary_meta.lineage
    ours, theirs = mini.state_dict(), primary.state_dict()
    copied = copied_from_primary(ours, keep)
    assert len(copied) == 4 + keep * 12 + 5  # embeddings (tokens, positions, LayerNorm), the kept layers, head
    for name in copied:
        assert torch.equal(ours[name], theirs[name]), f"{name} changed in Step 1b"


def test_a_bf16_step1b_saves_the_copied_layers_as_the_fp32_primary_holds_them(primaries, demo_pipeline, tmp_path):
    """DeepSpeed holds the whole module in bf16 and keeps fp32 masters of the trained parameters only: the copied
    (frozen) ones are saved from the values taken before the engine rounded them, not from the module (they were
    rounded to bf16 before: up to 0.0039 apart on the CPU reference run's norm weights)."""
    settings = demo_pipeline["settings"]
    out = tmp_path / "minipost-bf16"
    run_cmd([sys.executable, "run_minipost.py", "--from", str(primaries["base"]), "--out", str(out),
             "--data", str(demo_pipeline["out"] / "data" / "en"), "--seq-len", str(settings["seq_len"]),
             "--ds-config", str(small_batch("cpu_bf16_zero2.json", tmp_path)), "--keep-layers",
             str(settings["keep_layers"]), "--new-layers", str(settings["new_layers"]), "--steps", "2",
             "--save-every", "2"])
    mini, _ = load_mlm(checkpoint.latest_checkpoint(out))
    primary, _ = load_mlm(primaries["base"])
    ours, theirs = mini.state_dict(), primary.state_dict()
    copied = copied_from_primary(ours, settings["keep_layers"])
    assert copied and all(ours[k].dtype == torch.float32 for k in ours)
    changed = [k for k in copied if not torch.equal(ours[k], theirs[k])]
    assert not changed, f"copied weights saved other than the primary's: {changed}"


SYSTEMS = ("bl_base", "bl_small", "minijoint", "minipost")


@pytest.fixture(scope="session")
def adapted(demo_pipeline) -> dict[str, Path]:
    """The pipeline's Step 2 of all four systems to German (ZeRO stage 1, 60 updates, saved every 30)."""
    return {system: demo_pipeline["out"] / "step2" / "de" / system for system in SYSTEMS}


def launched_spec(demo_pipeline, script: str, out: Path) -> AdaptSpec:
    """The spec the pipeline launched ``script`` with (``--config``, on its "$ ..." line) for the run in ``out``."""
    for line in demo_pipeline["stdout"].splitlines():
        words = line.split()
        if line.startswith("$ ") and script in words and "--config" in words:
            spec = AdaptSpec.from_file(Path(words[words.index("--config") + 1]))
            if spec.out == out:
                return spec
    raise AssertionError(f"the pipeline's output has no launch of {script} for {out}")


@pytest.mark.parametrize("system", SYSTEMS)
def test_step2_target_loss_falls_with_compact_checkpoints(adapted, primaries, minipost, system):
    run_dir = adapted[system]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # Over the pipeline's trained demo bodies the loss starts near 6.6 (shared pieces start from their English rows)
    # and fell by 0.34-0.46 over 25 updates when measured; 0 when nothing trains. Here: updates 5 to 60.
    assert records[-1]["loss"] < records[0]["loss"] - 0.25, (system, records[0]["loss"], records[-1]["loss"])
    assert records[-1]["flops"] > records[0]["flops"] > 0 and "v100_days" in records[-1]
    ckpts = checkpoint.complete_checkpoints(run_dir)
    assert [c.name for c in ckpts] == ["step_00000000", "step_00000030", "step_00000060"]
    meta = checkpoint.load_meta(ckpts[-1])
    assert meta.kind == "embeddings" and meta.details["system"] == system and meta.details["lang"] == "de"
    assert meta.details["overlap"]["overlap"] > 5 and 0 < meta.details["overlap"]["ratio"] < 1
    weights = checkpoint.load_weights(ckpts[-1])
    assert set(weights) == {"embeddings.tokens.weight", "heads.main.bias"}
    # compact: no frozen tensor in the checkpoint. Our model.pt and DeepSpeed's model-states file would each hold
    # every weight of the body otherwise; here both together are well under two copies of the body's weights.
    body = {"bl_base": primaries["base"], "bl_small": primaries["small"], "minijoint": primaries["minijoint"],
            "minipost": minipost}[system]
    compact = sum(f.stat().st_size for f in ckpts[-1].iterdir() if f.name in ("model.pt", "mp_rank_00_model_states.pt"))
    full = 2 * (body / "model.pt").stat().st_size
    print(f"{system}: Step-2 weights {compact / 1e6:.2f} MB vs two copies of the body's {full / 1e6:.2f} MB")
    assert compact < 0.7 * full
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir.parents[2] / "tensorboard" / f"step2-de-{system}"))  # the pipeline's
    events.Reload()
    assert {"loss", "flops", "v100_days"} <= set(events.Tags()["scalars"])


def test_step2_says_it_learns_the_minijoint_rows_through_the_mini_model(demo_pipeline):
    """Of the demo's four Step-2 runs only MiniJoint's is over a two-head primary, and it prints (in the pipeline's
    output, from rank 0, once) that the rows are learned through the mini-model under the second head."""
    aux = demo_pipeline["settings"]["aux_layer"]
    lines = [line for line in demo_pipeline["stdout"].splitlines() if "a MiniJoint primary:" in line]
    assert len(lines) == 1, lines
    assert "minijoint" in lines[0]
    assert lines[0].endswith(f"Step 2 trains through its mini-model (layers 1-{aux} and the second head)"), lines


def test_step2_update_0_holds_the_initial_rows_and_resumes_exactly(adapted, primaries, demo_pipeline, tmp_path):
    """The update-0 checkpoint (where the time-to-target curves start) is the overlap-initialised rows at no cost,
    and a run that lost every later checkpoint resumes from it to the same final embeddings, bit for bit."""
    import shutil

    run_dir = tmp_path / "bl_base"
    shutil.copytree(adapted["bl_base"], run_dir)
    initial, *later = checkpoint.complete_checkpoints(run_dir)
    meta = checkpoint.load_meta(initial)
    assert (meta.step, meta.flops, meta.tokens) == (0, 0, 0)
    initial_weights = checkpoint.load_weights(initial)
    rows = initial_weights["embeddings.tokens.weight"]
    body, _ = load_mlm(primaries["base"])
    assert torch.equal(rows[:5], body.embeddings.tokens.weight[:5])  # the special rows, copied from the body
    assert not torch.equal(rows, checkpoint.load_weights(later[-1])["embeddings.tokens.weight"])
    # MiniPost's mini-model carries BL_BASE's embeddings and head unchanged: same seed, same initial rows, bit for bit
    minipost_initial = checkpoint.load_weights(checkpoint.complete_checkpoints(adapted["minipost"])[0])
    assert all(torch.equal(v, initial_weights[k]) for k, v in minipost_initial.items())
    for ckpt in later:
        shutil.rmtree(ckpt)
    spec = launched_spec(demo_pipeline, "run_adapt.py", adapted["bl_base"])
    spec.replace(out=run_dir, resume=True, log_root=tmp_path / "tensorboard").write(tmp_path / "resume.json")
    run_cmd(fork_cmd(1, "run_adapt.py", "--config", str(tmp_path / "resume.json")))  # as many ranks as saved it
    final = checkpoint.load_weights(checkpoint.latest_checkpoint(run_dir))
    want = checkpoint.load_weights(checkpoint.latest_checkpoint(adapted["bl_base"]))
    assert all(torch.equal(final[k], want[k]) for k in want)


def test_plug_refuses_other_lineage_and_accepts_own(adapted, primaries, tmp_path):
    emb = checkpoint.latest_checkpoint(adapted["minijoint"])
    bad = run_cmd([sys.executable, "-m", "ds_minimodel", "surgery", "plug", "--model", str(primaries["base"]),
                   "--embeddings", str(emb), "--out", str(tmp_path / "bad")], check=False)
    assert bad.returncode == 2 and "lineage" in bad.stderr and str(primaries["base"]) in bad.stderr
    assert not (tmp_path / "bad" / "meta.json").exists()
    run_cmd([sys.executable, "-m", "ds_minimodel", "surgery", "plug", "--model", str(primaries["minijoint"]),
             "--embeddings", str(emb), "--out", str(tmp_path / "good")])
    plugged, meta = load_mlm(tmp_path / "good")
    assert plugged.cfg.num_layers == load_mlm(primaries["minijoint"])[0].cfg.num_layers
    assert meta.tokenizer.sha256 == checkpoint.load_meta(emb).tokenizer.sha256
    trained = checkpoint.load_weights(emb)
    assert torch.equal(plugged.embeddings.tokens.weight, trained["embeddings.tokens.weight"])


def test_frozen_body_untouched_and_only_embeddings_in_optimizer(primaries, de_data, tmp_path, monkeypatch):
    """In process (1 rank): after Step 2 every frozen tensor is bitwise unchanged, the embeddings changed, and the
    optimizer holds exactly the trainable parameters."""
    from ds_minimodel.stages import adapt
    from ds_minimodel.stages.runner import run_stage

    monkeypatch.chdir(REPO)
    spec = AdaptSpec(system="bl_base", body=primaries["base"], data=de_data, out=tmp_path / "a",
                     ds_config=Path("ds_configs/cpu_fp32.json"), seq_len=64, steps=4, save_every=4, log_every=2)
    body, _ = load_mlm(primaries["base"])
    outcome = run_stage(spec, adapt.build)  # from the spec object itself: no argv
    result, stage = outcome.result, outcome.built.stage
    assert outcome.summary["step"] == 4 and json.loads((tmp_path / "a/run.json").read_text())["spec"] == spec.to_dict()
    trained = stage.model.state_dict()
    trainable = {"embeddings.tokens.weight", "heads.main.bias"}
    for name, before in body.state_dict().items():
        if name not in trainable:
            assert torch.equal(trained[name], before), f"frozen {name} changed"
    initial = checkpoint.load_weights(primaries["base"])  # source rows of shared pieces are where training starts
    assert not torch.equal(trained["embeddings.tokens.weight"][:5], initial["embeddings.tokens.weight"][:5])
    optimizer_params = [p for group in result.engine.optimizer.param_groups for p in group["params"]]
    assert all(len(group["params"]) > 0 for group in result.engine.optimizer.param_groups)
    names = {id(p): n for n, p in stage.model.named_parameters()}
    assert {names[id(p)] for p in optimizer_params} == trainable
    assert all(p.grad is None for n, p in stage.model.named_parameters() if n not in trainable)


def test_focus_with_anchored_copies_over_two_bf16_zero2_ranks(primaries, de_data, tmp_path):
    """--init focus --new-rows source --freeze-copied end to end: the copied rows (and their biases) are bit-identical
    after training while the rest moved, the rows FOCUS mixed are mixtures at update 0, every input's hash is in
    the checkpoint, the static vectors are the same in another process, and a resume with other options is refused."""
    from ds_minimodel.data.static_vectors import StaticSettings, train_static_vectors
    from ds_minimodel.data.tokenizer import Tokenizer
    from ds_minimodel.stages import adapt
    from ds_minimodel.stages.cli import spec_from_command_line

    out = tmp_path / "focus"
    args = ["--system", "bl_base", "--body", str(primaries["base"]), "--data", str(de_data), "--init", "focus",
            "--new-rows", "source", "--freeze-copied", "--ds-config", str(small_batch("cpu_bf16_zero2.json", tmp_path)),
            "--out", str(out), "--seq-len", "64", "--steps", "8", "--save-every", "8", "--log-every", "4"]
    # Launched from a spec file (what the options say, as the pipeline writes it), through the real launcher.
    spec = spec_from_command_line(AdaptSpec, args, checks=adapt.CHECKS)
    spec.write(tmp_path / "spec.json")
    run_cmd(fork_cmd(2, "run_adapt.py", "--config", str(tmp_path / "spec.json")))
    assert json.loads((out / "run.json").read_text())["spec"] == spec.to_dict()
    assert (out / "tensorboard" / "step2-de-bl_base").is_dir()  # the default log root and run name
    first, *_, last = checkpoint.complete_checkpoints(out)
    meta = checkpoint.load_meta(last)
    record, details = meta.details["initialisation"], meta.details
    assert details["init"] == "focus" and details["init_options"] == {"new_rows": "source", "freeze_copied": True}
    assert record["mixed"] > 100 and record["copied"] == details["overlap"]["overlap"] and record["drawn"] >= 0
    assert record["copied"] + record["mixed"] + record["drawn"] == details["vocab_size"]
    static = record["static_vectors"]
    assert static["tokenizer_sha256"] == Tokenizer.load(de_data / "spm.model").sha256
    pieces = Tokenizer.load(de_data / "spm.model").pieces()
    # Trained again in this process (not read from the folder, where the run kept them): bit for bit the same.
    assert train_static_vectors(de_data, pieces, StaticSettings(seed=1), cache=False)[2] == static
    assert (de_data / ".static_vectors").is_dir()
    start, end = checkpoint.load_weights(first), checkpoint.load_weights(last)
    source = Tokenizer.load(checkpoint.load_meta(primaries["base"]).tokenizer.path).pieces()
    copied = torch.tensor([p in set(source) for p in pieces])
    copied[:5] = True
    for name in ("embeddings.tokens.weight", "heads.main.bias"):
        assert torch.equal(start[name][copied], end[name][copied]), name
        assert not torch.equal(start[name][~copied], end[name][~copied]), name
    description = json.loads((out / "run.json").read_text())
    assert description["ds_config"]["optimizer"]["params"]["weight_decay"] == 0.0
    other = run_cmd(fork_cmd(1, "run_adapt.py", *[a for a in args if a != "--freeze-copied"], "--resume"),
                    check=False)
    assert other.returncode != 0 and "init_options" in other.stderr


def test_word_list_inputs_are_checked_before_any_work(en_data, de_data, tmp_path):
    """--init wechsel needs a readable word list and source text prepared with the body's own tokenizer; the other
    initialisers refuse WECHSEL's options rather than ignore them, but take the list for --word-anchors. (The
    mixtures and anchors themselves: test_embedding_init.)"""
    from ds_minimodel.data.tokenizer import Tokenizer
    from ds_minimodel.stages.adapt import check_word_list_inputs

    words = tmp_path / "de-en.tsv"
    words.write_text("Haus\thouse\n", encoding="utf-8")
    english = Tokenizer.load(en_data / "spm.model").sha256
    spec = AdaptSpec(system="bl_base", body=tmp_path, data=de_data, out=tmp_path / "a", ds_config=tmp_path,
                     init="wechsel", word_list=words, source_data=en_data)
    check_word_list_inputs(spec, english)
    for changes, message in (({"word_list": None}, "needs --word-list"),
                             ({"word_list": tmp_path / "none.tsv"}, "cannot read"),
                             ({"source_data": de_data}, "must be the body's own language and tokenizer"),
                             ({"init": "focus"}, "--source-data is used by --init wechsel only, not focus"),
                             ({"init": "focus", "source_data": None},
                              "--word-list is used by --init wechsel or --word-anchors only"),
                             ({"init": "focus", "source_data": None, "word_list": None, "word_anchors": True},
                              "--word-anchors needs --word-list")):
        with pytest.raises(InputError, match=message):
            check_word_list_inputs(dataclasses.replace(spec, **changes), english)
    anchored = dataclasses.replace(spec, init="focus", source_data=None, word_anchors=True)
    assert check_word_list_inputs(anchored, english).pairs == [("Haus", "house")]


def test_wechsel_from_its_spec_starts_from_the_aligned_mixtures(primaries, de_data, tmp_path, monkeypatch):
    """In process (1 rank), --init wechsel end to end over the shipped help-page lexicon: the update-0 rows are the
    mixtures that the run's own inputs give (the word list, both languages' static vectors, read back from the data
    folders where the run kept them), only the special rows are copies, and every input is named with its hash; with
    both languages' vectors given and gensim blocked, the same rows."""
    from ds_minimodel.config import file_sha256
    from ds_minimodel.data.bilingual import WordList
    from ds_minimodel.data.prepare import prepare
    from ds_minimodel.data.static_vectors import StaticSettings, keep_vectors, train_static_vectors
    from ds_minimodel.data.tokenizer import Tokenizer
    from ds_minimodel.model.embedding_init import initial_rows
    from ds_minimodel.model.transforms import extract_embeddings
    from ds_minimodel.stages import adapt
    from ds_minimodel.stages.runner import run_stage

    monkeypatch.chdir(REPO)
    # English text with the body's own tokenizer: a slice of the demo corpus, so its vectors train in seconds.
    english = Tokenizer.load(checkpoint.load_meta(primaries["base"]).tokenizer.path)
    lines = (DEMO / "corpus/en.txt").read_text(encoding="utf-8").splitlines(keepends=True)[:3000]
    (tmp_path / "en.txt").write_text("".join(lines), encoding="utf-8")
    en_data = tmp_path / "en"
    prepare(tmp_path / "en.txt", en_data, tokenizer=english.path, progress=False, workers=1)
    word_list = REPO / "reference_data/lexicons/de-en.help.tsv"
    spec = AdaptSpec(system="bl_base", body=primaries["base"], data=de_data, out=tmp_path / "w",
                     ds_config=Path("ds_configs/cpu_fp32.json"), init="wechsel", word_list=word_list,
                     source_data=en_data, seq_len=64, steps=4, save_every=4, log_every=2)
    assert run_stage(spec, adapt.build).summary["step"] == 4
    first, last = checkpoint.complete_checkpoints(spec.out)
    meta = checkpoint.load_meta(first)
    details, record = meta.details, meta.details["initialisation"]
    assert meta.step == 0 and checkpoint.load_meta(last).step == 4
    assert details["init_options"]["word_list"]["sha256"] == file_sha256(word_list)
    alignment = record["alignment"]
    assert alignment["pairs_used"] >= 100 and alignment["pair_cosine_after"] > alignment["pair_cosine_before"] + 0.1
    assert alignment["source_vectors"]["data"] == str(en_data.resolve())
    assert record["copied"] == 5 and record["mixed"] > 1000
    assert record["copied"] + record["mixed"] + record["drawn"] == details["vocab_size"]

    german = Tokenizer.load(de_data / "spm.model")
    aligned = adapt.align_static_vectors(spec, WordList.read(word_list), german, english)
    body, _ = load_mlm(primaries["base"])
    source_embeddings, source_bias = extract_embeddings(body)
    want = initial_rows("wechsel", english.pieces(), source_embeddings, source_bias, german.pieces(),
                        std=body.cfg.init_std, generator=torch.Generator().manual_seed(spec.seed), aligned=aligned)
    start, end = checkpoint.load_weights(first), checkpoint.load_weights(last)
    assert torch.equal(start["embeddings.tokens.weight"], want.embeddings)
    assert torch.equal(start["heads.main.bias"], want.bias)
    assert not torch.equal(start["embeddings.tokens.weight"][5:], end["embeddings.tokens.weight"][5:])
    # Both languages' vectors given, trained before (as a machine without gensim gets them): the same rows.
    given = {}
    for lang, folder, tokenizer in (("de", de_data, german), ("en", en_data, english)):
        given[lang] = tmp_path / f"{lang}.npz"
        keep_vectors(given[lang], *train_static_vectors(folder, tokenizer.pieces(), StaticSettings(seed=spec.seed)))
    again = dataclasses.replace(spec, out=tmp_path / "w2", static_vectors=given["de"],
                                source_static_vectors=given["en"], steps=1, save_every=1)
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "gensim", None)
        patch.setitem(sys.modules, "gensim.models", None)
        run_stage(again, adapt.build)
    rows = checkpoint.load_weights(checkpoint.complete_checkpoints(again.out)[0])["embeddings.tokens.weight"]
    assert torch.equal(rows, want.embeddings)


def test_focus_from_given_static_vectors_needs_no_gensim_and_starts_from_the_same_rows(primaries, de_data, tmp_path,
                                                                                       monkeypatch):
    """In process (1 rank), --init focus --static-vectors (vectors trained before, as a GPU machine without gensim
    gets them): gensim cannot be imported, the update-0 rows are those the trained vectors give, the checkpoint names
    the file; another initialiser refuses the option."""
    from ds_minimodel.data.static_vectors import StaticSettings, keep_vectors, train_static_vectors
    from ds_minimodel.data.tokenizer import Tokenizer
    from ds_minimodel.model.embedding_init import initial_rows
    from ds_minimodel.model.transforms import extract_embeddings
    from ds_minimodel.stages import adapt
    from ds_minimodel.stages.runner import run_stage

    monkeypatch.chdir(REPO)
    german = Tokenizer.load(de_data / "spm.model")
    static = train_static_vectors(de_data, german.pieces(), StaticSettings(seed=1), cache=False)
    given = tmp_path / "de.npz"
    keep_vectors(given, *static)
    spec = AdaptSpec(system="bl_base", body=primaries["base"], data=de_data, out=tmp_path / "f",
                     ds_config=Path("ds_configs/cpu_fp32.json"), init="focus", static_vectors=given, seq_len=64,
                     steps=2, save_every=2, log_every=1)
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "gensim", None)
        patch.setitem(sys.modules, "gensim.models", None)
        assert run_stage(spec, adapt.build).summary["step"] == 2
        with pytest.raises(InputError, match="--static-vectors is for the static vectors of --init focus or wechsel, "
                                             "not overlap"):
            run_stage(dataclasses.replace(spec, init="overlap", out=tmp_path / "o"), adapt.build)
    first = checkpoint.complete_checkpoints(spec.out)[0]
    record = checkpoint.load_meta(first).details["initialisation"]["static_vectors"]
    assert record["given"] == str(given.resolve()) and record["vectors_sha256"] == static[2]["vectors_sha256"]
    body, _ = load_mlm(primaries["base"])
    source_embeddings, source_bias = extract_embeddings(body)
    english = Tokenizer.load(checkpoint.load_meta(primaries["base"]).tokenizer.path)
    want = initial_rows("focus", english.pieces(), source_embeddings, source_bias, german.pieces(),
                        std=body.cfg.init_std, generator=torch.Generator().manual_seed(spec.seed), static=static)
    assert torch.equal(checkpoint.load_weights(first)["embeddings.tokens.weight"], want.embeddings)
    assert not (tmp_path / "o").exists()


def test_word_anchors_from_their_spec_copy_the_translations_rows(primaries, de_data, tmp_path, monkeypatch):
    """In process (1 rank), --init overlap --word-anchors over the shipped German help lexicon: the update-0 row of
    every anchored piece is its translation's source row, the pieces the source spells the same keep their own, and
    the run records how many rows the list anchored and the list's hash."""
    from ds_minimodel.config import file_sha256
    from ds_minimodel.data.bilingual import WordList, piece_anchors, word_encoder
    from ds_minimodel.data.tokenizer import NUM_SPECIAL, Tokenizer
    from ds_minimodel.model.transforms import extract_embeddings
    from ds_minimodel.stages import adapt
    from ds_minimodel.stages.runner import run_stage

    monkeypatch.chdir(REPO)
    word_list = REPO / "reference_data/lexicons/de-en.help.tsv"
    spec = AdaptSpec(system="bl_base", body=primaries["base"], data=de_data, out=tmp_path / "a",
                     ds_config=Path("ds_configs/cpu_fp32.json"), init="overlap", word_anchors=True,
                     word_list=word_list, seq_len=64, steps=2, save_every=2, log_every=1)
    assert run_stage(spec, adapt.build).summary["step"] == 2
    first = checkpoint.complete_checkpoints(spec.out)[0]
    details = checkpoint.load_meta(first).details
    english = Tokenizer.load(checkpoint.load_meta(primaries["base"]).tokenizer.path)
    german = Tokenizer.load(de_data / "spm.model")
    anchors = piece_anchors(WordList.read(word_list), word_encoder(german.encode, german.pieces()),
                            word_encoder(english.encode, english.pieces()), NUM_SPECIAL)
    spelled = {i for i, piece in enumerate(german.pieces()) if piece in set(english.pieces())}
    anchored = {t: s for t, s in anchors.items() if t not in spelled}
    assert len(anchored) > 100 and details["initialisation"]["word_anchored"] == len(anchored)
    assert details["init_options"]["word_list"]["sha256"] == file_sha256(word_list)
    assert details["init_options"]["word_anchored"] == len(anchored)
    source_rows, _ = extract_embeddings(load_mlm(primaries["base"])[0])
    rows = checkpoint.load_weights(first)["embeddings.tokens.weight"]
    targets, sources = torch.tensor(list(anchored)), torch.tensor(list(anchored.values()))
    assert torch.equal(rows[targets], source_rows[sources])
