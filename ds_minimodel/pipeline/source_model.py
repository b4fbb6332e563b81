"""The pipeline's starting point when it is given one: an existing pretrained English model (``source.model``: a
Hugging Face BERT, DistilBERT, RoBERTa or XLM-R folder, or a model folder or checkpoint of ours) instead of a Step-1
run.

It stands for BL_BASE's primary (MiniPost's Step 1b starts from it too): no Step 1 runs for it, the source language
is read with its tokenizer, a bare encoder gets its MLM head trained first (``run_head.py``), and
every record of the run names its folder and weights hash (``GivenModel.to_record``): ``<out>/step1/
source_model.json``, checked at every later run over the folder, and results.json's ``source_model``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds_minimodel.config import read_json
from ds_minimodel.errors import InputError
from ds_minimodel.systems import BASELINE, get_system


def given_primary() -> str:
    """The primary ``source.model`` stands for: BL_BASE's (MiniPost, whose Step 1b starts from it, shares it)."""
    return get_system(BASELINE).primary


GIVEN_KINDS = ("pretrained", "mlm-head", "hf-import")
"""The kinds of model (``train.record.Kind`` values) a pipeline can start from: a Step-1 model, a bare encoder whose
head was trained, an imported Hugging Face model (a mini-model, a finetuned model or embeddings are not a primary)."""


@dataclass(frozen=True, kw_only=True)
class GivenModel:
    """What the pipeline knows of ``source.model``, read once before any work (``given_model``), and what every
    record of the run says of it."""

    path: str
    """The folder, resolved."""
    kind: str
    """Its ``Kind`` value: ``hf-import`` for a Hugging Face folder."""
    weights_sha256: str
    """Hash of its weights as the pipeline uses them (an imported folder: after import): the lineage every
    checkpoint trained from it carries."""
    tokenizer: dict[str, str]
    """Its tokenizer, {"path", "sha256"}: the source language's."""
    mlm_head: str
    """pretrained (or trained): usable as it is; initialised: a bare encoder whose head the ``head`` job trains."""
    num_layers: int
    hidden_size: int
    max_positions: int
    lowercases: bool
    """Whether its tokenizer case-folds text (an uncased model): the default of the targets' ``lowercase``."""

    @property
    def needs_head(self) -> bool:
        return self.mlm_head == "initialised"

    def to_record(self) -> dict[str, Any]:
        """What run records and results.json say of it (results.json: with ``trained_here``)."""
        return {"path": self.path, "kind": self.kind, "weights_sha256": self.weights_sha256,
                "tokenizer_sha256": self.tokenizer["sha256"], "mlm_head": self.mlm_head,
                "num_layers": self.num_layers, "hidden_size": self.hidden_size}


CONTINUED = "whole model"
"""results.json's ``source_model.trained_here`` when the head section trained the body too (``train_body``)."""


def trained_here(head: Any) -> dict[str, str]:
    """What results.json adds to the given model's record about its training here: nothing, unless the pipeline's head
    section (``settings.HeadSettings``) continued the whole model with MLM."""
    return {"trained_here": CONTINUED} if head is not None and head.train_body else {}


def given_model(path: str | None, where: str) -> GivenModel | None:
    """A pipeline's ``source.model`` (``path``; named ``where`` in errors) read and checked, None when the config
    gives none: a model the import accepts, of a kind a primary can be, with its tokenizer at hand. Loads the weights
    once (seconds for a BERT-base)."""
    if path is None:
        return None
    from ds_minimodel.data.tokenizer import load_tokenizer
    from ds_minimodel.model.hf import HEAD_INITIALISED, is_hf_folder
    from ds_minimodel.model.loading import load_mlm
    from ds_minimodel.train.checkpoint import META

    folder = Path(path)
    if not folder.is_dir():
        raise InputError(f"{folder}: not a folder ({where} must be a Hugging Face model folder, or a model folder or "
                         "checkpoint of ours)")
    if not is_hf_folder(folder) and not (folder / META).is_file():
        raise InputError(f"{folder}: not a model: neither config.json (a Hugging Face folder) nor {META} (a model "
                         f"folder or checkpoint of ours) in it ({where})")
    model, record = load_mlm(folder)  # refuses an architecture the import cannot reproduce, naming the file
    if record.kind.value not in GIVEN_KINDS:
        raise InputError(f"{folder}: a model of kind {record.kind.value!r}, not a pretrained English model ({where} "
                         f"takes {', '.join(GIVEN_KINDS)})")
    tokenizer = load_tokenizer(record.tokenizer_dict, folder)
    head = record.details.get("mlm_head", "pretrained")
    return GivenModel(path=str(folder.resolve()), kind=record.kind.value, weights_sha256=record.lineage,
                      tokenizer={"path": str(Path(tokenizer.path).resolve()), "sha256": tokenizer.sha256},
                      mlm_head="initialised" if head == HEAD_INITIALISED else head,
                      num_layers=model.cfg.num_layers, hidden_size=model.cfg.hidden_size,
                      max_positions=model.cfg.max_positions,
                      lowercases=tokenizer.encode("The Cat Sat") == tokenizer.encode("the cat sat"))


def case_folded(lowercase: bool | None, given: GivenModel | None) -> bool:
    """Whether a language's tokenizer is trained to case-fold: its ``lowercase`` setting, or where that says
    nothing, the given model's casing (off without one)."""
    if lowercase is not None:
        return lowercase
    return given is not None and given.lowercases


SOURCE_MODEL_RECORD = "source_model.json"
"""``<out>/step1/source_model.json``: the model ``source.model`` gave a pipeline's finished steps (``GivenModel``),
written by the ``step1-base`` job before anything is trained from it; a later run over the same folder must give the
same model."""


def check_recorded(record: Path, given: GivenModel | None, primary_run: Path, source: str) -> None:
    """Refuse, before any work, a pipeline folder whose finished steps were trained from another source model than
    ``given`` (the config's now: its weights, tokenizer or head differ; its folder may have moved), or from none, or
    over a primary pretrained in ``primary_run``: their results would stand for a model they were not trained from.
    ``record``: the folder's ``SOURCE_MODEL_RECORD``."""
    from ds_minimodel.train.checkpoint import RUN  # torch: only when a pipeline runs

    before = read_json(record) if record.is_file() else None
    now = None if given is None else given.to_record()
    if before is not None and now is None:
        raise InputError(f"{record}: this folder's steps were trained from the given model {before.get('path')}, "
                         f"but {source} gives no source.model now: give it again, or another out")
    # The model's content decides, not where it is: a folder moved or reached by another path is the same model.
    differ = [] if before is None or now is None else [key for key, value in now.items()
                                                       if key != "path" and before.get(key) != value]
    if differ:
        changed = "; ".join(f"{key} {before.get(key)!r} there, {now[key]!r} now" for key in differ)
        raise InputError(f"{record}: this folder's steps were trained from another source model than {source} "
                         f"gives now ({changed}); their results would stand for a model they were not trained "
                         "from: give the pipeline another out, or the model it had")
    if now is not None and before is None and (primary_run / RUN).is_file():
        raise InputError(f"{primary_run}: holds a primary pretrained here, which source.model {given.path} would "
                         f"replace under its finished steps: give the pipeline another out")
