"""Export a model folder or checkpoint as a Hugging Face ``RobertaFor*`` folder (``ds-minimodel hf export``).

Tensor names come from ``ds_minimodel.model.hf``, which owns them; this module writes the folder: weights, config and
a tokenizer that encodes as ours does (see ``ds_minimodel.model.hf`` for what the export promises).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ds_minimodel.config import ModelConfig, write_json
from ds_minimodel.data.hf_tokenizer import HFTokenizer, copy_hf_tokenizer
from ds_minimodel.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    MASK_ID,
    NUM_SPECIAL,
    PAD_ID,
    SPECIAL_PIECES,
    UNK_ID,
    AnyTokenizer,
    Tokenizer,
    load_tokenizer,
)
from ds_minimodel.errors import InputError
from ds_minimodel.folders import require_output
from ds_minimodel.model.encoder import HEADS, MAIN_HEAD, MaskedLM, TaskModel
from ds_minimodel.model.hf import (
    ARCHITECTURE,
    CONFIG,
    EXPORT_RECORD,
    HEAD_INITIALISED,
    SAFETENSORS,
    state_dict_to_hf,
)
from ds_minimodel.model.loading import load, task_head
from ds_minimodel.model.surgery import swap_checked


def sentencepiece_tokenizer_json(tokenizer: Tokenizer) -> str:
    """A ``tokenizers`` description (tokenizer.json) that encodes as our SentencePiece model does.

    The unigram model takes the SentencePiece pieces and scores, and the normaliser is SentencePiece's own
    precompiled one (NFKC-based by default), so Viterbi segmentation runs over the same lattice. Measured on the
    demo's 14,667 German lines: identical ids on all but 1-3 of them, where two segmentations score exactly the same
    and the two libraries break the tie differently. Only unigram models convert this way.
    """
    from sentencepiece import sentencepiece_model_pb2
    from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
    from tokenizers import Tokenizer as RustTokenizer

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(Path(tokenizer.path).read_bytes())
    if proto.trainer_spec.model_type != sentencepiece_model_pb2.TrainerSpec.UNIGRAM:
        kind = sentencepiece_model_pb2.TrainerSpec.ModelType.Name(proto.trainer_spec.model_type)
        raise InputError(f"{tokenizer.path}: a SentencePiece {kind} model; export converts unigram models only "
                         "(ds_minimodel.data.prepare's default)")
    rust = RustTokenizer(models.Unigram([(p.piece, p.score) for p in proto.pieces], unk_id=UNK_ID,
                                        byte_fallback=proto.trainer_spec.byte_fallback))
    spec = proto.normalizer_spec
    steps = [normalizers.Precompiled(spec.precompiled_charsmap)] if spec.precompiled_charsmap else []
    if spec.remove_extra_whitespaces:  # SentencePiece drops leading and trailing spaces and collapses runs
        steps += [normalizers.Strip(left=True, right=True), normalizers.Replace(Regex(" {2,}"), " ")]
    rust.normalizer = normalizers.Sequence(steps)
    # "first": the word-start mark goes before the text, not again after each special token inside it.
    scheme = "first" if spec.add_dummy_prefix else "never"
    rust.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme)
    rust.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme=scheme)
    rust.add_special_tokens([AddedToken(SPECIAL_PIECES[i], special=True) for i in range(NUM_SPECIAL)])
    rust.post_processor = _roberta_layout(SPECIAL_PIECES[BOS_ID], BOS_ID, SPECIAL_PIECES[EOS_ID], EOS_ID)
    return rust.to_str()


def _roberta_layout(bos: str, bos_id: int, eos: str, eos_id: int) -> Any:
    """The input layout every model here is trained with (tasks.features): <s> a </s> and <s> a </s></s> b </s>,
    all segment 0."""
    from tokenizers import processors

    return processors.TemplateProcessing(single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}",
                                         special_tokens=[(bos, bos_id), (eos, eos_id)])


def _imported_tokenizer_json(tokenizer: HFTokenizer) -> str:
    """The imported tokenizer's tokenizer.json (the folder's own file, padding and truncation settings included,
    or transformers' conversion of its vocabulary files) with RoBERTa's pair layout.

    For single texts BERT's [CLS] a [SEP] is already that layout; for pairs BERT writes [CLS] a [SEP] b [SEP] with
    segment 1 on b, but our model was finetuned on [CLS] a [SEP][SEP] b [SEP], all segment 0 (it has no segment
    input): the exported tokenizer must feed what the model was trained on.
    """
    from tokenizers import Tokenizer as RustTokenizer

    own = Path(tokenizer.path) / "tokenizer.json"
    rust = RustTokenizer.from_file(str(own)) if own.is_file() else RustTokenizer.from_str(tokenizer.backend_json())
    bos, eos = tokenizer.hf_token(BOS_ID), tokenizer.hf_token(EOS_ID)
    rust.post_processor = _roberta_layout(bos, int(tokenizer.hf_of_ours[BOS_ID]), eos,
                                          int(tokenizer.hf_of_ours[EOS_ID]))
    return rust.to_str()


def _write_tokenizer(tokenizer: AnyTokenizer, out: Path, max_positions: int) -> None:
    """tokenizer.json, with the special tokens and the input layout the model was trained with, and a
    tokenizer_config.json naming PreTrainedTokenizerFast: the generic class that takes tokenizer.json as it is
    (AutoTokenizer loads it in every transformers release since 4.x), where the folder's own class could disagree
    with the exported config.json (an old BERT folder without a tokenizer_class would be read as a RoBERTa
    tokenizer). No token_type_ids: the model has no segment embeddings."""
    if isinstance(tokenizer, HFTokenizer):
        copy_hf_tokenizer(tokenizer.path, out, config=False)  # vocabulary files too, for tools that read them
        tokenizer_json = _imported_tokenizer_json(tokenizer)
        names = {i: tokenizer.hf_token(i) for i in range(NUM_SPECIAL)}
    else:
        tokenizer_json, names = sentencepiece_tokenizer_json(tokenizer), SPECIAL_PIECES
    (out / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    special = {f"{role}_token": names[i] for role, i in (("bos", BOS_ID), ("eos", EOS_ID), ("sep", EOS_ID),
                                                          ("cls", BOS_ID), ("unk", UNK_ID), ("pad", PAD_ID),
                                                          ("mask", MASK_ID))}
    write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", **special, "model_max_length": max_positions,
        "model_input_names": ["input_ids", "attention_mask"], "padding_side": "right", "truncation_side": "right"})
    write_json(out / "special_tokens_map.json", special)


def _hf_config(cfg: ModelConfig, *, head: str, special: dict[str, int], type_vocab_size: int,
               labels: list[str]) -> dict[str, Any]:
    """config.json of the exported ``RobertaFor*`` model."""
    config: dict[str, Any] = {
        "architectures": [ARCHITECTURE[head]], "model_type": "roberta",
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads, "intermediate_size": cfg.ffn_size, "hidden_act": "gelu",
        "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.attention_dropout,
        # RoBERTa's position ids of real tokens start at pad_token_id + 1; the rows below are never used.
        "max_position_embeddings": cfg.max_positions + special["pad"] + 1,
        "position_embedding_type": "absolute", "type_vocab_size": type_vocab_size,
        "initializer_range": cfg.init_std, "layer_norm_eps": cfg.layer_norm_eps,
        "pad_token_id": special["pad"], "bos_token_id": special["bos"], "eos_token_id": special["eos"],
        "tie_word_embeddings": True, "torch_dtype": "float32",
    }
    if head in HEADS and HEADS[head].labelled:
        config["id2label"] = {str(i): label for i, label in enumerate(labels)}
        config["label2id"] = {label: i for i, label in enumerate(labels)}
    if head in HEADS and HEADS[head].pooled:
        config["problem_type"] = "single_label_classification"
    return config


def export_folder(source: Path, out: Path, *, embeddings: Path | None = None) -> dict[str, Any]:
    """``export``: the model in ``source`` (MLM or Step-3 task model; an HF folder is imported first), with the
    Step-2 ``embeddings`` swapped in if given, as a Hugging Face ``RobertaFor*`` folder in ``out``, with the
    tokenizer the embeddings belong to. Returns what ``out/ds_minimodel_export.json`` records."""
    from safetensors.torch import save_file

    source, out = Path(source), Path(out)
    require_output(out, what="a Hugging Face folder")
    labels: list[str] = []
    model: MaskedLM | TaskModel
    model, meta = load(source)  # an HF folder is imported on the fly
    head = "mlm"
    if isinstance(model, TaskModel):
        task = task_head(meta, source)
        head, labels = task.kind, list(task.labels)
    cfg = model.cfg
    if cfg.pre_norm:
        raise InputError(f"{source}: a pre-LN model (pre_norm true); RobertaFor* folders hold post-LN models only")
    if cfg.attention_bias != "none":
        raise InputError(f"{source}: attention_bias {cfg.attention_bias!r}; RobertaFor* folders have no attention bias")
    tokenizer_ref, owner, record_embeddings = meta.tokenizer_dict, source, None
    if embeddings is not None:
        emb_meta = swap_checked(model, meta, source, Path(embeddings))
        tokenizer_ref, owner = emb_meta.tokenizer_dict, Path(embeddings)
        record_embeddings = {"path": str(Path(embeddings).resolve()), "weights_sha256": emb_meta.weights_sha256,
                             "lang": emb_meta.details.get("lang"), "system": emb_meta.details.get("system")}
    tokenizer = load_tokenizer(tokenizer_ref, owner)
    if tokenizer.vocab_size != cfg.vocab_size:
        raise InputError(f"{owner}: tokenizer {tokenizer.path} has {tokenizer.vocab_size} tokens but the model "
                         f"{cfg.vocab_size} embedding rows")
    notes = []
    if head == "mlm" and meta.details.get("mlm_head") == HEAD_INITIALISED:
        notes.append("the MLM head is the one initialised at import, never trained: its predictions are noise")
    if head == "mlm" and cfg.aux_head_layer is not None:
        notes.append(f"MiniJoint's second head (after layer {cfg.aux_head_layer}) is not exported")
    state = model.state_dict()
    if isinstance(tokenizer, HFTokenizer):
        # Back to the tokenizer's own ids: HF row r is our row ours_of_hf[r].
        back = torch.from_numpy(tokenizer.ours_of_hf)
        state = {**state, "embeddings.tokens.weight": state["embeddings.tokens.weight"][back]}
        if head == "mlm":
            state[f"heads.{MAIN_HEAD}.bias"] = state[f"heads.{MAIN_HEAD}.bias"][back]
        special = {role: int(tokenizer.hf_of_ours[i]) for role, i in (("pad", PAD_ID), ("bos", BOS_ID),
                                                                       ("eos", EOS_ID))}
        # The exported tokenizer emits no segment ids, but a BERT tokenizer built from the copied vocab.txt (e.g.
        # BertTokenizer.from_pretrained) emits 0 and 1: both must index a (zero) row.
        type_vocab_size = 2
    else:
        special, type_vocab_size = {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID}, 1
    hf_state = state_dict_to_hf(state, num_layers=cfg.num_layers, position_offset=special["pad"] + 1,
                                type_vocab_size=type_vocab_size, head=head)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / CONFIG, _hf_config(cfg, head=head, special=special, type_vocab_size=type_vocab_size,
                                        labels=labels))
    save_file(hf_state, str(out / SAFETENSORS), metadata={"format": "pt"})
    _write_tokenizer(tokenizer, out, cfg.max_positions)
    record = {
        "architecture": ARCHITECTURE[head], "source": str(source.resolve()),
        "source_weights_sha256": meta.weights_sha256, "primary_sha256": meta.lineage,
        "embeddings": record_embeddings, "tokenizer": {"path": str(tokenizer.path), "sha256": tokenizer.sha256},
        "notes": notes,
    }
    write_json(out / EXPORT_RECORD, record)
    return record


