"""Hugging Face interoperability: import a BERT, DistilBERT, RoBERTa or XLM-R model folder, export ours as RoBERTa.

    python -m ds_minimodel hf import --from HF_FOLDER --out MODEL_FOLDER
    python -m ds_minimodel hf export --model FOLDER [--embeddings STEP2_CHECKPOINT] --out HF_FOLDER

This module owns every Hugging Face tensor name (STYLE: one module owns key names); the parity tests use it too.

* Import (``import_folder``): ``config.json`` + ``model.safetensors`` / ``pytorch_model.bin`` (sharded or not) +
  tokenizer files of a ``bert``, ``distilbert``, ``roberta`` or ``xlm-roberta`` masked LM or bare encoder, read from
  the folder only (nothing is fetched). What the architectures do differently:
  - RoBERTa's position ids start at padding_idx + 1 (2): the first rows of its table are never used by real tokens.
  - BERT adds a token-type (segment) embedding; our model only ever feeds segment 0, so its row 0 is folded into
    every position row (see ``state_dict_from_hf``). Its pooler and next-sentence head are dropped (MLM does not
    use them) and said so in the import notes.
  - BERT's MLM head is ``cls.predictions.transform.{dense,LayerNorm}`` + ``cls.predictions.bias``, RoBERTa's
    ``lm_head.{dense,layer_norm,bias}``; both tie the decoder to the word embeddings, as we do.
  - DistilBERT is BERT's layer under other names (``transformer.layer.i.attention.q_lin``, ``sa_layer_norm``,
    ``ffn.lin1``, ...; head ``vocab_transform``, ``vocab_layer_norm``, ``vocab_projector``) and config keys
    (``dim``, ``n_layers``, ``activation``, ...), without token types, LayerNorm eps fixed at 1e-12. Its
    ``sinusoidal_pos_embds`` table is stored like a learned one and imported as one (said in the notes).
  - A bare encoder (``BertModel``: no MLM head) gets a freshly initialised head, recorded as
    ``"mlm_head": "initialised"``; Steps 1b and 2 refuse it until ``run_head.py`` trained it.
  - The tokenizer stays the folder's own (``tokenizer.HFTokenizer``); its five special tokens move to our reserved
    ids 0..4 and the embedding rows move with them.
  Anything else (relative positions, another activation, a decoder, an unknown model type, an untied output
  projection, a task head) is refused with the file and the problem named.
* Export (``hf_export.export_folder``): a model folder or checkpoint (an MLM, MiniPost/MiniJoint mini-models included,
  or a Step-3 task model), optionally with a Step-2 embeddings checkpoint swapped in, written as a ``RobertaFor*``
  folder (``model.safetensors``, ``config.json``, tokenizer) that ``transformers``' ``Auto*`` classes load. A
  SentencePiece tokenizer is written as a ``tokenizer.json`` (unigram model, SentencePiece's own normaliser); an
  imported Hugging Face tokenizer is copied, the rows go back to its ids, and its tokenizer.json gets the pair layout
  our finetuning used.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from ds_minimodel.config import ModelConfig, read_json
from ds_minimodel.data.hf_tokenizer import HFTokenizer, copy_hf_tokenizer
from ds_minimodel.data.tokenizer import (
    PAD_ID,
)
from ds_minimodel.errors import InputError, load_error
from ds_minimodel.folders import require_output
from ds_minimodel.model.encoder import MAIN_HEAD, MaskedLM
from ds_minimodel.train import checkpoint

CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
PYTORCH_BIN = "pytorch_model.bin"
INDEX_SUFFIX = ".index.json"  # sharded weights: model.safetensors.index.json / pytorch_model.bin.index.json
EXPORT_RECORD = "ds_minimodel_export.json"
HEAD_INITIALISED = "initialised"
HEAD_PRETRAINED = "pretrained"

MODEL_TYPES = ("bert", "distilbert", "roberta", "xlm-roberta")

# --------------------------------------------------------------------------------------------- tensor names
# Our name -> Hugging Face name (without the base model's prefix). Q, K and V are three HF tensors and one fused
# ``qkv`` here; positions and token types are transformed, not renamed (state_dict_from_hf / state_dict_to_hf).

_EMBEDDINGS = {"embeddings.tokens.weight": "embeddings.word_embeddings.weight",
               "embeddings.norm.weight": "embeddings.LayerNorm.weight",
               "embeddings.norm.bias": "embeddings.LayerNorm.bias"}
_POSITIONS = ("embeddings.positions.weight", "embeddings.position_embeddings.weight")
_TOKEN_TYPES = "embeddings.token_type_embeddings.weight"


@dataclass(frozen=True)
class _Names:
    """One architecture's tensor names (without the base model's prefix, which a bare encoder's lack)."""
    prefix: str
    layer: str  # the i-th layer is f"{layer}.{i}"
    qkv: tuple[str, str, str]  # in the order of our fused rows
    parts: dict[str, str]  # our name in a layer -> theirs
    head: dict[str, str]  # the MLM head's dense and norm
    head_bias: str
    decoder: str  # tied to the word embeddings: a copy, if saved at all


_BERT_LAYER = {"attention.out": "attention.output.dense", "attention_norm": "attention.output.LayerNorm",
               "ffn_in": "intermediate.dense", "ffn_out": "output.dense", "ffn_norm": "output.LayerNorm"}
_BERT_QKV = ("attention.self.query", "attention.self.key", "attention.self.value")
_ROBERTA = _Names("roberta.", "encoder.layer", _BERT_QKV, _BERT_LAYER,
                  {"dense": "lm_head.dense", "norm": "lm_head.layer_norm"}, "lm_head.bias", "lm_head.decoder")
_NAMES = {
    "bert": _Names("bert.", "encoder.layer", _BERT_QKV, _BERT_LAYER,
                   {"dense": "cls.predictions.transform.dense", "norm": "cls.predictions.transform.LayerNorm"},
                   "cls.predictions.bias", "cls.predictions.decoder"),
    "distilbert": _Names("distilbert.", "transformer.layer", ("attention.q_lin", "attention.k_lin", "attention.v_lin"),
                         {"attention.out": "attention.out_lin", "attention_norm": "sa_layer_norm",
                          "ffn_in": "ffn.lin1", "ffn_out": "ffn.lin2", "ffn_norm": "output_layer_norm"},
                         {"dense": "vocab_transform", "norm": "vocab_layer_norm"}, "vocab_projector.bias",
                         "vocab_projector"),
    "roberta": _ROBERTA,
    "xlm-roberta": _ROBERTA,
}
# DistilBERT's config.json keys -> BERT's (what _read_config reads); its LayerNorms' eps is fixed in its code.
_DISTILBERT_KEYS = {"dim": "hidden_size", "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
                    "hidden_dim": "intermediate_size", "activation": "hidden_act", "dropout": "hidden_dropout_prob",
                    "attention_dropout": "attention_probs_dropout_prob"}
_TASK_HEADS = {  # RoBERTa's task heads, as RobertaFor{SequenceClassification,TokenClassification,QuestionAnswering}
    "sequence": {"dense": "classifier.dense", "out": "classifier.out_proj"},
    "token": {"out": "classifier"},
    "span": {"out": "qa_outputs"},
}
ARCHITECTURE = {"mlm": "RobertaForMaskedLM", "sequence": "RobertaForSequenceClassification",
                 "token": "RobertaForTokenClassification", "span": "RobertaForQuestionAnswering"}
# Tensors a masked LM does not use, dropped with a note: BERT's pooler and next-sentence head, buffers.
_DROPPED = {"pooler.": "the pooler (a [CLS] dense + tanh for next-sentence prediction and classification)",
            "cls.seq_relationship.": "the next-sentence prediction head"}
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")


def _renamed(name: str) -> str:
    """Names of very old (TensorFlow-converted) BERT checkpoints: LayerNorm.gamma/beta for weight/bias."""
    return name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")


def state_dict_from_hf(tensors: Mapping[str, torch.Tensor], *, model_type: str, num_layers: int,
                       position_offset: int, source: str = "weights"
                       ) -> tuple[dict[str, torch.Tensor], dict[str, str], list[str]]:
    """Our MaskedLM tensors from a BERT/DistilBERT/RoBERTa state dict, in the HF vocabulary order.

    ``tensors``: names as HF saves them, with or without the base prefix (``bert.`` / ``roberta.``; a bare encoder
    has none). ``position_offset``: the first position row real tokens use (RoBERTa: padding_idx + 1; BERT: 0).
    Returns (state, origin: our name -> HF name(s), notes). The MLM head's tensors are in ``state`` only when the
    file has a head. Missing body tensors, unknown tensors and an untied output projection raise InputError naming
    ``source``.
    """
    if model_type not in _NAMES:
        raise InputError(f"{source}: model type {model_type!r} is not one of {', '.join(MODEL_TYPES)}")
    names = _NAMES[model_type]
    prefix = names.prefix
    hf = {}
    for name, tensor in tensors.items():
        name = _renamed(name)
        hf[name[len(prefix):] if name.startswith(prefix) else name] = tensor
    used: set[str] = set()

    def take(name: str) -> torch.Tensor:
        if name not in hf:
            raise InputError(f"{source}: tensor {prefix}{name} is missing (a {model_type} model of {num_layers} "
                             "layers needs it)")
        used.add(name)
        return hf[name]

    state: dict[str, torch.Tensor] = {}
    origin: dict[str, str] = {}
    for ours, theirs in _EMBEDDINGS.items():
        state[ours], origin[ours] = take(theirs), theirs
    positions = take(_POSITIONS[1])[position_offset:]
    origin[_POSITIONS[0]] = _POSITIONS[1]
    if _TOKEN_TYPES in hf:
        # Our model has no segment input: every token is segment 0, so BERT's sum word + position + type[0] is kept
        # exactly by adding type[0] to every position row. Positions, not the token embeddings: Step 2 replaces the
        # token embeddings with a new language's, whose fresh rows would otherwise lose the type-0 vector.
        positions = positions + take(_TOKEN_TYPES)[0]
        origin[_POSITIONS[0]] += f" + {_TOKEN_TYPES}[0]"
    state[_POSITIONS[0]] = positions
    for i in range(num_layers):
        layer = f"{names.layer}.{i}"
        for kind in ("weight", "bias"):
            qkv = [f"{layer}.{part}.{kind}" for part in names.qkv]
            parts = [take(name) for name in qkv]
            try:
                state[f"layers.{i}.attention.qkv.{kind}"] = torch.cat(parts, dim=0)  # rows: q, k, v
            except RuntimeError:
                raise InputError(f"{source}: {layer} query/key/value {kind}s have shapes "
                                 f"{[tuple(p.shape) for p in parts]}, which do not stack") from None
            origin[f"layers.{i}.attention.qkv.{kind}"] = " + ".join(qkv)
            for ours, theirs in names.parts.items():
                state[f"layers.{i}.{ours}.{kind}"] = take(f"{layer}.{theirs}.{kind}")
                origin[f"layers.{i}.{ours}.{kind}"] = f"{layer}.{theirs}.{kind}"

    head = {f"{names.head[part]}.{kind}": f"heads.{MAIN_HEAD}.{part}.{kind}"
            for part in ("dense", "norm") for kind in ("weight", "bias")}
    head[names.head_bias] = f"heads.{MAIN_HEAD}.bias"
    present = [name for name in head if name in hf]
    if present and len(present) < len(head):
        missing = sorted(set(head) - set(present))
        raise InputError(f"{source}: the MLM head is incomplete: {', '.join(missing)} missing")
    if present:
        for theirs, ours in head.items():
            state[ours], origin[ours] = take(theirs), theirs
    notes: list[str] = []
    decoder = names.decoder
    if f"{decoder}.weight" in hf:  # a saved copy of the tied matrix: it must BE the word embeddings
        used.add(f"{decoder}.weight")
        if not torch.equal(hf[f"{decoder}.weight"], hf["embeddings.word_embeddings.weight"]):
            raise InputError(f"{source}: {decoder}.weight differs from the word embeddings: an untied output "
                             "projection, which this model (tied, like BERT and RoBERTa) cannot hold")
    if f"{decoder}.bias" in hf:
        used.add(f"{decoder}.bias")
        if present and not torch.equal(hf[f"{decoder}.bias"], hf[names.head_bias]):
            raise InputError(f"{source}: {decoder}.bias differs from {names.head_bias}; they are one tensor")
    for start, why in _DROPPED.items():
        if any(name.startswith(start) for name in hf):
            notes.append(f"dropped {why}")
    unknown = sorted(name for name in set(hf) - used if name not in _BUFFERS and not name.startswith(tuple(_DROPPED)))
    if unknown:
        raise InputError(f"{source}: unexpected tensors {', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''}"
                         f" ({len(unknown)} in all): not part of a {model_type} masked LM or bare encoder (a task "
                         "head? import the masked-LM or base model folder)")
    return state, origin, notes


def state_dict_to_hf(state: Mapping[str, torch.Tensor], *, num_layers: int, position_offset: int,
                     type_vocab_size: int, head: str) -> dict[str, torch.Tensor]:
    """A ``RobertaFor*`` state dict from ours (the inverse of ``state_dict_from_hf`` for RoBERTa names).

    ``head``: "mlm" (our main MLM head; an aux head is not exported) or a TaskModel kind ("sequence", "token",
    "span"). The ``position_offset`` leading position rows (padding_idx and below, which real tokens never use)
    and the ``type_vocab_size`` token-type rows are zeros: our model has neither.
    """
    names = _ROBERTA
    prefix = names.prefix
    out: dict[str, torch.Tensor] = {}
    for ours, theirs in _EMBEDDINGS.items():
        out[prefix + theirs] = state[ours]
    positions = state[_POSITIONS[0]]
    out[prefix + _POSITIONS[1]] = torch.cat([positions.new_zeros(position_offset, positions.shape[1]), positions])
    out[prefix + _TOKEN_TYPES] = positions.new_zeros(type_vocab_size, positions.shape[1])
    for i in range(num_layers):
        for kind in ("weight", "bias"):
            for part, tensor in zip(names.qkv, state[f"layers.{i}.attention.qkv.{kind}"].chunk(3, dim=0)):
                out[f"{prefix}{names.layer}.{i}.{part}.{kind}"] = tensor
            for ours, theirs in names.parts.items():
                out[f"{prefix}{names.layer}.{i}.{theirs}.{kind}"] = state[f"layers.{i}.{ours}.{kind}"]
    if head == "mlm":
        for part, theirs in names.head.items():
            for kind in ("weight", "bias"):
                out[f"{theirs}.{kind}"] = state[f"heads.{MAIN_HEAD}.{part}.{kind}"]
        out[names.head_bias] = state[f"heads.{MAIN_HEAD}.bias"]
    else:
        for part, theirs in _TASK_HEADS[head].items():
            for kind in ("weight", "bias"):
                out[f"{theirs}.{kind}"] = state[f"{part}.{kind}"]
    return {k: v.detach().float().contiguous().clone() for k, v in out.items()}


# ------------------------------------------------------------------------------------------------------ import

def is_hf_folder(folder: Path) -> bool:
    """A Hugging Face model folder (config.json) rather than one of ours (meta.json)."""
    folder = Path(folder)
    return (folder / CONFIG).is_file() and not (folder / checkpoint.META).is_file()


def _read_config(folder: Path) -> dict[str, Any]:
    """config.json, checked for an architecture our model reproduces exactly."""
    if not folder.is_dir():
        raise InputError(f"{folder}: not a folder (a Hugging Face model folder holds config.json, weights and "
                         "tokenizer files)")
    path = folder / CONFIG
    if not path.is_file():
        raise InputError(f"{path}: not found; {folder} is not a Hugging Face model folder")
    config = read_json(path)
    if not isinstance(config, dict):
        raise InputError(f"{path}: expected a JSON object, got {type(config).__name__}")
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        # Only post-LN encoders with learned absolute positions map one to one onto our model; HF gives pre-LN
        # (roberta-prelayernorm), rotary or relative variants model types of their own, refused here.
        raise InputError(f"{path}: model_type {model_type!r} is not supported; supported: {', '.join(MODEL_TYPES)}")
    key: dict[str, str] = {}  # BERT's key -> this file's, for the errors
    if model_type == "distilbert":
        key = {bert: theirs for theirs, bert in _DISTILBERT_KEYS.items()}
        config = {**{k: v for k, v in config.items() if k not in _DISTILBERT_KEYS}, "layer_norm_eps": 1e-12,
                  **{bert: config[theirs] for theirs, bert in _DISTILBERT_KEYS.items() if theirs in config}}
    position_type = config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise InputError(f"{path}: position_embedding_type {position_type!r}; only learned absolute positions "
                         "are supported")
    act = config.get("hidden_act", "gelu")
    if act != "gelu":
        raise InputError(f"{path}: {key.get('hidden_act', 'hidden_act')} {act!r}; our layers use the exact (erf) "
                         "GELU, HF's 'gelu'")
    for flag in ("is_decoder", "add_cross_attention"):
        if config.get(flag):
            raise InputError(f"{path}: {flag} is true; only bidirectional encoders without cross-attention are "
                             "supported")
    required = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "max_position_embeddings")
    missing = [key.get(name, name) for name in required if not isinstance(config.get(name), int)]
    if missing:
        raise InputError(f"{path}: missing or non-integer {', '.join(missing)}")
    return config


def _load_weights_file(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise InputError(f"{path}: weights file missing")
    try:
        if path.name.endswith(".safetensors"):
            from safetensors.torch import load_file

            tensors = load_file(str(path), device="cpu")
        else:  # weights_only: loading never runs code from the file
            tensors = torch.load(path, map_location="cpu", weights_only=True)
    except ImportError:
        raise InputError(f"{path}: reading safetensors needs the safetensors package (pip install "
                         "'ds_minimodel[hf]')") from None
    except Exception as err:  # noqa: BLE001 - any failure to parse is a bad file for the user
        raise load_error(path, err) from None
    if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
        raise InputError(f"{path}: not a state dict of tensors")
    return tensors


def _read_weights(folder: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """All tensors of the folder's weights (safetensors preferred, sharded or not), and the file that names them."""
    for name in (SAFETENSORS, PYTORCH_BIN):
        single, index = folder / name, folder / (name + INDEX_SUFFIX)
        if single.is_file():
            return _load_weights_file(single), single
        if index.is_file():
            listing = read_json(index)
            weight_map = listing.get("weight_map") if isinstance(listing, dict) else None
            if not isinstance(weight_map, dict) or not weight_map:
                raise InputError(f"{index}: no weight_map: not a sharded-weights index")
            tensors: dict[str, torch.Tensor] = {}
            for shard in sorted(set(weight_map.values())):
                tensors.update(_load_weights_file(folder / shard))
            return tensors, index
    other = [n for n in ("tf_model.h5", "flax_model.msgpack") if (folder / n).is_file()]
    found = f"; found {', '.join(other)} (convert it to PyTorch first)" if other else ""
    raise InputError(f"{folder}: no PyTorch weights ({SAFETENSORS} or {PYTORCH_BIN}, or their sharded "
                     f"{INDEX_SUFFIX} index){found}")


def _model_config(config: dict[str, Any], path: Path, *, vocab_size: int, max_positions: int) -> ModelConfig:
    try:
        return ModelConfig(
            vocab_size=vocab_size, hidden_size=config["hidden_size"], num_layers=config["num_hidden_layers"],
            num_heads=config["num_attention_heads"], ffn_size=config["intermediate_size"], max_positions=max_positions,
            dropout=float(config.get("hidden_dropout_prob", 0.1)),
            attention_dropout=float(config.get("attention_probs_dropout_prob", 0.1)),
            layer_norm_eps=float(config.get("layer_norm_eps", 1e-12)),
            init_std=float(config.get("initializer_range", 0.02)))
    except InputError as err:
        raise InputError(f"{path}: {err}") from None


def position_offset(config: dict[str, Any]) -> int:
    """First position row a real token uses: RoBERTa counts positions from padding_idx + 1, (Distil)BERT from 0."""
    return 0 if config["model_type"] in ("bert", "distilbert") else int(config.get("pad_token_id", PAD_ID)) + 1


def import_folder(folder: Path) -> tuple[MaskedLM, checkpoint.Record]:
    """Our MaskedLM and its meta from a Hugging Face BERT/DistilBERT/RoBERTa folder (see the module docstring).

    The meta is what a model folder records (kind "hf-import", model_config, tokenizer = the folder's tokenizer,
    weights_sha256 = the lineage every descendant carries), plus ``mlm_head`` ("pretrained" or "initialised") and
    ``import_notes`` (what was dropped, trimmed or initialised). Deterministic: importing twice gives the same
    weights and hash.
    """
    folder = Path(folder)
    config = _read_config(folder)
    config_path = folder / CONFIG
    tensors, weights_path = _read_weights(folder)
    tokenizer = HFTokenizer.load(folder)
    offset = position_offset(config)
    state, origin, notes = state_dict_from_hf(tensors, model_type=config["model_type"],
                                              num_layers=config["num_hidden_layers"], position_offset=offset,
                                              source=str(weights_path))
    if config.get("sinusoidal_pos_embds"):
        notes.append("the sinusoidal position table (fixed in DistilBERT) is imported as a learned one: a run that "
                     "trains the body's embeddings (run_head.py --train-body) trains it too")
    tokens_key, bias_key = "embeddings.tokens.weight", f"heads.{MAIN_HEAD}.bias"
    rows = state[tokens_key].shape[0]
    if rows != config["vocab_size"]:
        raise InputError(f"{weights_path}: {origin[tokens_key]} has {rows} rows but {config_path} says vocab_size "
                         f"{config['vocab_size']}")
    if tokenizer.vocab_size > rows:
        raise InputError(f"{folder}: the tokenizer has {tokenizer.vocab_size} tokens but the model only {rows} "
                         "embedding rows; the tokenizer files belong to another model")
    if tokenizer.vocab_size < rows:
        # Rows no token id reaches (vocabularies padded to a multiple of 8, say): nothing can feed or predict them.
        notes.append(f"dropped {rows - tokenizer.vocab_size} embedding rows beyond the tokenizer's "
                     f"{tokenizer.vocab_size} tokens")
    order = torch.from_numpy(tokenizer.hf_of_ours)  # our id -> HF row: the special tokens move to ids 0..4
    state[tokens_key] = state[tokens_key][order]
    head = HEAD_PRETRAINED if bias_key in state else HEAD_INITIALISED
    if bias_key in state:
        state[bias_key] = state[bias_key][order]
    cfg = _model_config(config, config_path, vocab_size=tokenizer.vocab_size,
                        max_positions=config["max_position_embeddings"] - offset)
    with torch.device("meta"):
        model = MaskedLM(cfg)
    expected = model.state_dict()
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise InputError(f"{weights_path}: {origin.get(name, name)} has shape {tuple(tensor.shape)}, but "
                             f"{config_path} implies {tuple(expected[name].shape)}")
    if head == HEAD_INITIALISED:
        # Seeded, so that importing the same folder twice gives the same weights and therefore the same lineage.
        generator = torch.Generator().manual_seed(0)
        h = cfg.hidden_size
        state.update({
            f"heads.{MAIN_HEAD}.dense.weight": torch.empty(h, h).normal_(0.0, cfg.init_std, generator=generator),
            f"heads.{MAIN_HEAD}.dense.bias": torch.zeros(h),
            f"heads.{MAIN_HEAD}.norm.weight": torch.ones(h), f"heads.{MAIN_HEAD}.norm.bias": torch.zeros(h),
            bias_key: torch.zeros(cfg.vocab_size)})
        notes.append("no MLM head in the folder (a bare encoder): initialised one (dense N(0, init_std), identity "
                     "LayerNorm, zero bias); train it (run_head.py) before Steps 1b and 2")
    model.load_state_dict({k: v.detach().float().contiguous().clone() for k, v in state.items()}, strict=True,
                          assign=True)
    meta = {
        "kind": checkpoint.Kind.HF_IMPORT.value,
        "model_config": cfg.to_dict(),
        "tokenizer": {"path": str(tokenizer.path.resolve()), "sha256": tokenizer.sha256},
        "mlm_head": head,
        "hf_source": {"path": str(folder.resolve()), "model_type": config["model_type"],
                      "architectures": config.get("architectures"), "weights": weights_path.name},
        "import_notes": notes,
        "num_parameters": model.num_parameters(),
        "weights_sha256": checkpoint.weights_sha256(model.state_dict()),
    }
    return model, checkpoint.Record.of(meta, folder)


def require_trained_head(meta: checkpoint.Record, folder: Path, use: str) -> None:
    """Refuse a bare encoder's untrained MLM head where its predictions matter (MiniPost copies it frozen, Step 2
    learns embeddings through it)."""
    if meta.details.get("mlm_head") == HEAD_INITIALISED:
        raise InputError(f"{folder}: its MLM head was initialised at import (the folder held a bare encoder), not "
                         f"trained; {use} needs a trained head: run_head.py --from {folder} ... "
                         "first, and use its checkpoint")


def import_to(folder: Path, out: Path) -> checkpoint.Record:
    """``import``: the folder's model as one of our model folders, with its tokenizer files copied into
    ``out/tokenizer`` (the folder then stands alone). Returns the meta written."""
    folder, out = Path(folder), Path(out)
    require_output(out, what="an imported model")
    model, meta = import_folder(folder)
    tokenizer_dir = out / "tokenizer"
    copy_hf_tokenizer(folder, tokenizer_dir)
    meta = meta.with_values(tokenizer={"path": str(tokenizer_dir.resolve()),
                                       "sha256": HFTokenizer.load(tokenizer_dir).sha256})
    return checkpoint.save_model_folder(out, model.state_dict(), meta)
