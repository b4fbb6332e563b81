"""Step 2: learn a target language's embeddings over a frozen transformer body (``run_adapt.py``).

The four systems differ only in the body (paper section 2):

| system    | body the embeddings are trained over                                   |
|-----------|------------------------------------------------------------------------|
| bl_base   | the full 12-layer primary model (Artetxe et al., 2020)                  |
| bl_small  | a 4-layer model pretrained on its own                                   |
| minijoint | MiniJoint's mini-model: bottom N layers + the second MLM head           |
| minipost  | MiniPost's mini-model from Step 1b: N copied layers + k trained layers  |

New embeddings start from the source rows of pieces shared with the source vocabulary, the rest N(0, 0.02)
(footnote 1), or from another initialiser (``--init``, ``model.embedding_init``). Only the token embeddings (tied
to the output projection) and the output bias train; each checkpoint holds just those plus optimizer state, and
records the body's hash so the embeddings are only ever plugged into a model of the same lineage.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ds_minimodel import flops
from ds_minimodel.data.bilingual import WordList, fit_alignment, piece_anchors, word_encoder
from ds_minimodel.data.prepare import tokenizer_path
from ds_minimodel.data.static_vectors import StaticSettings, train_static_vectors
from ds_minimodel.data.streams import MLMBatchStream, PackedDataset, TokenShards
from ds_minimodel.data.tokenizer import NUM_SPECIAL, AnyTokenizer, load_tokenizer, open_tokenizer
from ds_minimodel.errors import InputError
from ds_minimodel.model import hf
from ds_minimodel.model.bodies import body_of, taken_from
from ds_minimodel.model.embedding_init import (
    INITIALISERS,
    NEW_ROWS,
    STATIC_VECTORS,
    WORD_LIST,
    AlignedVectors,
    anchor_copied_rows,
    get_initialiser,
    initial_rows,
    initialisers_that,
)
from ds_minimodel.model.encoder import MaskedLM
from ds_minimodel.model.loading import load_mlm
from ds_minimodel.model.transforms import (
    extract_embeddings,
    freeze_for_adaptation,
    swap_embeddings,
)
from ds_minimodel.stages.cli import option_name, run_main, spec_from_command_line
from ds_minimodel.stages.runner import Built, Context, run_stage
from ds_minimodel.stages.specs import AdaptSpec, check_fields, one_of
from ds_minimodel.stages.steps import LOSSES
from ds_minimodel.systems import Step, get_system
from ds_minimodel.train import checkpoint
from ds_minimodel.train.engine import Stage
from ds_minimodel.train.record import Record

CHECKS = {"system": functools.partial(get_system, source=""), "init": one_of(INITIALISERS),
          "new_rows": one_of(NEW_ROWS)}
"""What the spec's annotations cannot say about its values (``specs.check_fields``)."""


def load_body(system: str, folder: Path,
              say: Callable[[str], None] = lambda line: None) -> tuple[MaskedLM, Record]:
    """The frozen body for ``system`` (``model.bodies``): a dual-head primary is cut down to its mini-model, or loses
    its second head, here (``say`` is told which), a Hugging Face folder is imported. A folder of the wrong kind for
    the system is refused."""
    entry = get_system(system)
    model, meta = load_mlm(folder)
    hf.require_trained_head(meta, folder, "Step 2 (new embeddings are learned through the MLM head)")
    body = body_of(entry).take(model, meta.kind, Path(folder), entry)
    if (line := taken_from(model, body)) is not None:
        say(f"{folder}: {line}")
    return body, meta


def disable_dropout(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        if hasattr(module, "attention_dropout"):
            module.attention_dropout = 0.0


def check_word_list_inputs(spec: AdaptSpec, source_sha256: str) -> WordList | None:
    """A word list's inputs exist and fit: the list (returned, read) for WECHSEL or --word-anchors, and WECHSEL's
    source text prepared with the body's tokenizer. None where neither is asked; an option no one uses is refused."""
    if WORD_LIST not in get_initialiser(spec.init).needs:
        users = " or ".join(initialisers_that(need=WORD_LIST))
        for option in ("source_data", "source_static_vectors"):
            if getattr(spec, option) is not None:
                raise InputError(f"{option_name(option)} is used by --init {users} only, not {spec.init}")
        if spec.word_list is not None and not spec.word_anchors:
            raise InputError(f"{option_name('word_list')} is used by --init {users} or --word-anchors only")
        if spec.word_anchors and spec.word_list is None:
            raise InputError("--word-anchors needs --word-list (a bilingual word list)")
        return WordList.read(spec.word_list) if spec.word_anchors else None
    if spec.word_list is None or spec.source_data is None:
        raise InputError(f"--init {spec.init} needs --word-list (a bilingual word list) and --source-data (the source "
                         "corpus prepared with the body's tokenizer)")
    words = WordList.read(spec.word_list)
    prepared = TokenShards.open(spec.source_data)
    if prepared.tokenizer_sha256 != source_sha256:
        raise InputError(f"{spec.source_data}: prepared with tokenizer {prepared.tokenizer_sha256[:12]}, the body's "
                         f"is {source_sha256[:12]}: --source-data must be the body's own language and tokenizer")
    return words


def align_static_vectors(spec: AdaptSpec, words: WordList, target: AnyTokenizer, source: AnyTokenizer,
                         say: Callable[[str], None] = lambda line: None) -> AlignedVectors:
    """Both languages' static vectors and the orthogonal map between them (``data.bilingual``)."""
    settings = StaticSettings(seed=spec.seed, rare=spec.rare_vectors)
    t_vec, t_known, t_record = train_static_vectors(spec.data, target.pieces(), settings, given=spec.static_vectors,
                                                    say=say)
    s_vec, s_known, s_record = train_static_vectors(spec.source_data, source.pieces(), settings,
                                                    given=spec.source_static_vectors, say=say)
    alignment = fit_alignment(words, (word_encoder(target.encode, target.pieces()), t_vec, t_known),
                              (word_encoder(source.encode, source.pieces()), s_vec, s_known))
    return AlignedVectors(alignment.target(t_vec), t_known, alignment.source(s_vec), s_known,
                          {**alignment.record, "target_vectors": t_record, "source_vectors": s_record})


def build(spec: AdaptSpec, ctx: Context) -> Built:
    """The Step-2 stage: the body frozen, the target's rows initialised, the stream of target text."""
    # Every input is checked before anything is written: a refused run leaves --out as it was.
    check_fields(spec, CHECKS)  # a spec file's unknown system or initialiser, refused by name
    entry = get_initialiser(spec.init)
    for option, given in (("rare_vectors", spec.rare_vectors != "drawn"), ("static_vectors", spec.static_vectors)):
        if given and STATIC_VECTORS not in entry.needs:
            raise InputError(f"{option_name(option)} is for the static vectors of --init "
                             f"{' or '.join(initialisers_that(need=STATIC_VECTORS))}, not {spec.init}")
    if spec.transliterate and not entry.transliterates:
        raise InputError(f"--transliterate extends the copied rows of --init "
                         f"{' or '.join(initialisers_that(transliterate=True))}; --init {spec.init} copies only the "
                         "special pieces")
    if spec.word_anchors and not entry.takes_word_anchors:
        raise InputError(f"--word-anchors works with --init {' or '.join(initialisers_that(word_anchors=True))}, "
                         f"not {spec.init}")
    ds_config = ctx.ds_config
    train_cfg = ctx.train_cfg
    info, batch = ctx.info, ctx.batch
    shards = TokenShards.open(spec.data)
    lang = spec.lang or Path(spec.data).resolve().name
    target = load_tokenizer({"path": str(tokenizer_path(spec.data)), "sha256": shards.tokenizer_sha256}, spec.data)
    name = spec.run_name or f"{Step.ADAPT}-{lang}-{spec.system}"

    def say(line: str) -> None:  # a silence of a minute or more ahead, or what was made of the body: rank 0 says it
        if info.rank == 0:
            print(f"[{name}] {line}", flush=True)

    model, body_meta = load_body(spec.system, spec.body, say)
    source = load_tokenizer(body_meta.tokenizer_dict, spec.body)
    words = check_word_list_inputs(spec, source.sha256)
    if train_cfg.seq_len > model.cfg.max_positions:
        raise InputError(f"--seq-len {train_cfg.seq_len} exceeds the body's max_positions {model.cfg.max_positions}")

    # Footnote 1: shared pieces start from the source rows, the others from N(0, 0.02), or another initialiser's
    # rows; same seed on every rank, so every rank builds the same rows (FOCUS's static vectors included).
    generator = torch.Generator().manual_seed(spec.seed)
    source_embeddings, source_bias = extract_embeddings(model)
    static = aligned = None
    if entry.needs == {STATIC_VECTORS}:  # the target's alone (with a word list: both languages', aligned below)
        static = train_static_vectors(spec.data, target.pieces(), StaticSettings(seed=spec.seed,
                                                                                 rare=spec.rare_vectors),
                                      given=spec.static_vectors, say=say)
    anchors = None
    if words is not None and WORD_LIST in entry.needs:
        aligned = align_static_vectors(spec, words, target, source, say)
    if words is not None and spec.word_anchors:
        anchors = piece_anchors(words, word_encoder(target.encode, target.pieces()),
                                word_encoder(source.encode, source.pieces()), NUM_SPECIAL)
    shared_with = None
    if spec.shared_with is not None:
        anchor = open_tokenizer(spec.shared_with)
        shared_with = set(anchor.pieces())
    try:
        rows = initial_rows(spec.init, source.pieces(), source_embeddings, source_bias, target.pieces(),
                            std=model.cfg.init_std, generator=generator, new_rows=spec.new_rows, static=static,
                            aligned=aligned, shared_with=shared_with, transliterate=spec.transliterate,
                            anchors=anchors)
    except ImportError as err:  # anyascii missing
        raise InputError(f"--transliterate: {err}") from None
    overlap = rows.stats
    swap_embeddings(model, rows.embeddings, rows.bias)
    trainable = freeze_for_adaptation(model, train_positions=spec.train_positions,
                                      train_embedding_norm=spec.train_embedding_norm)
    if spec.freeze_copied:
        anchor_copied_rows(model, rows.copied)
        ds_config = without_weight_decay(ds_config)
    init_options = {"new_rows": spec.new_rows, "freeze_copied": spec.freeze_copied,
                    **({"transliterated": rows.record["transliterated"]} if spec.transliterate else {})}
    if shared_with is not None:
        init_options["shared_with"] = {"path": str(anchor.path), "sha256": anchor.sha256}
    if aligned is not None:  # a resume with another word list or source text is another initialisation
        init_options["word_list"] = {"path": aligned.record["word_list"], "sha256": aligned.record["word_list_sha256"]}
        init_options["source_data"] = aligned.record["source_vectors"]["data"]
    if anchors is not None:
        init_options.update(word_anchored=rows.record["word_anchored"],
                            word_list={"path": str(words.path.resolve()), "sha256": words.sha256})
    frozen = {k: v for k, v in model.state_dict().items() if k not in trainable}
    body_sha256 = checkpoint.weights_sha256(frozen)
    if spec.body_dropout == "off":
        disable_dropout(model)
    cfg = model.cfg

    dataset = PackedDataset(shards, train_cfg.seq_len, train_cfg.packing)
    stream = MLMBatchStream(dataset, micro_batch_size=batch.micro, world_size=info.world_size, rank=info.rank,
                            seed=spec.seed, vocab_size=cfg.vocab_size, seq_len=train_cfg.seq_len,
                            mask_prob=train_cfg.mask_prob)  # refuses too little data
    record = {
        "variant": spec.system, "lang": lang, "model": cfg.to_dict(), "data": str(Path(spec.data).resolve()),
        "tokenizer_sha256": shards.tokenizer_sha256, "seq_len": spec.seq_len, "mask_prob": spec.mask_prob,
        "packing": spec.packing,
        "source": body_sha256, "body": str(Path(spec.body).resolve()), "body_dropout": spec.body_dropout,
        "init": spec.init, "init_options": init_options, "trainable": trainable,
    }
    banner = (f"[{name}] vocabulary overlap with the source: {overlap['overlap']:,} of "
              f"{overlap['target_vocab']:,} target pieces ({overlap['ratio']:.1%}) start from source rows"
              + (f", {rows.record['mixed']:,} from mixtures of them ({spec.init})" if "mixed" in rows.record else "")
              + f", {rows.record['drawn']:,} drawn ({spec.new_rows}); "
              f"trainable: {', '.join(trainable)}; body dropout {spec.body_dropout}")
    stage = Stage(
        name=name,
        model=model,
        loss_fn=LOSSES[Step.ADAPT],
        flops_per_update=flops.per_update_flops(Step.ADAPT, cfg, seq_len=train_cfg.seq_len, batch=batch.global_batch,
                                                mask_prob=train_cfg.mask_prob),
        meta={"kind": checkpoint.Kind.EMBEDDINGS.value, "system": spec.system, "lang": lang,
              "primary_sha256": body_meta.lineage, "body_sha256": body_sha256,
              "body": str(Path(spec.body).resolve()), "body_layers": cfg.num_layers,
              "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
              "tokenizer": {"path": str(Path(target.path).resolve()), "sha256": target.sha256},
              "source_tokenizer": {"path": str(Path(source.path).resolve()), "sha256": source.sha256},
              "overlap": overlap, "init": spec.init, "init_options": init_options, "initialisation": rows.record,
              "body_dropout": spec.body_dropout, "trainable": trainable},
        compact_checkpoints=True,
        save_initial=True,
    )
    return Built(stage=stage, stream=stream, train_cfg=train_cfg, record=record, banner=banner, ds_config=ds_config,
                 summary=lambda result: {"overlap": overlap})


def run(spec: AdaptSpec) -> dict[str, Any]:
    return run_stage(spec, build).summary


def without_weight_decay(ds_config: dict[str, Any]) -> dict[str, Any]:
    """The DeepSpeed config with its optimizer's weight decay at 0 (decay would move the anchored rows)."""
    optimizer = ds_config.get("optimizer")
    if not optimizer:
        return ds_config
    return {**ds_config, "optimizer": {**optimizer, "params": {**optimizer.get("params", {}), "weight_decay": 0.0}}}


def main(argv: list[str] | None = None) -> int:
    return run_main(run, spec_from_command_line(AdaptSpec, argv, description=__doc__, checks=CHECKS))
