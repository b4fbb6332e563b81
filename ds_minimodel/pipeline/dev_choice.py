"""Which Step-2 checkpoint to use, chosen on a target language's dev file (Step 4, ``chosen_on_dev.txt``).

Step 2 does not always end at its best: on a small corpus, read many times over, or from rows a word list anchors, its
last checkpoint can read the language worse than an earlier one, its initial rows (update 0) included (RESULTS.md,
"Hindi on test at 0.39 MB", "When Step 2 pays over its own update 0"). Where a task has a dev file in a target
language, Step 4 scores every checkpoint of each Step-2 run (the main one and each further one, ``step2_seeds``) on
it too, and the checkpoint with the highest mean over finetuning seeds of the selection metric is chosen for that
task, system, language and run (the earliest of equals: it cost least). The test file is read at that checkpoint
beside the last one, so the choice is reported by a score it did not see. The selection metric is macro-F1 where the
task kind scores it (classification: dev and test files can hold different label mixes, and accuracy on dev rewards
leaning on dev's commonest label), else the kind's headline metric (accuracy for tagging, F1 for QA). The paper's
analysis (Tables 2-3, the speedups) keeps reading the whole test curves, whatever is chosen here. Each choice names
the finetuning seed whose classifier reads dev best at it, and the ``hf export`` command that writes the two as one
model.
"""
from __future__ import annotations

import shlex
import statistics
from collections import defaultdict
from pathlib import Path

from ds_minimodel.pipeline.ownership import step2_run
from ds_minimodel.pipeline.records import DevChoice, Results, Score
from ds_minimodel.systems import order_key

SELECTION_METRIC = "macro_f1"
"""What a choice maximises where the task kind scores it; else the kind's headline metric (``Score.metric``)."""


Run = tuple[str, str, str, int | None]
"""A Step-2 run's scores: task, system, language, Step-2 seed (None: the main run)."""


def _by_update(records: list[Score]) -> dict[Run, dict[int, list[Score]]]:
    groups: dict[Run, dict[int, list[Score]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        groups[(r.task, r.system, r.lang, r.step2_seed)][r.step2_update].append(r)
    return groups


def _order(run: Run) -> tuple[str, str, tuple[int, int, str], int]:
    """By task, language and system; the main run before the further ones."""
    task, system, lang, step2_seed = run
    return task, lang, order_key(system), -1 if step2_seed is None else step2_seed


def _mean(records: list[Score], metric: str) -> float:
    return statistics.mean(r.metrics[metric] for r in records)


def choose(dev: list[Score], test: list[Score]) -> list[DevChoice]:
    """One choice per task, system, language and Step-2 run that ``dev`` (Step 4's dev scores) holds, with ``test``
    (the same runs' zero-shot test scores) read at the chosen checkpoint and at the last."""
    on_test = _by_update(test)
    choices = []
    for (task, system, lang, step2_seed), checkpoints in sorted(_by_update(dev).items(), key=lambda kv: _order(kv[0])):
        first = next(iter(checkpoints.values()))[0]
        selected_on = SELECTION_METRIC if SELECTION_METRIC in first.metrics else first.metric
        means = {update: _mean(records, selected_on) for update, records in checkpoints.items()}
        chosen, last = max(sorted(means), key=lambda u: means[u]), max(means)  # max keeps the first (earliest) best
        tested = on_test.get((task, system, lang, step2_seed), {})
        at_chosen, at_last = tested.get(chosen, []), tested.get(last, [])
        scores = [r.score for r in at_chosen]
        best = max(sorted(checkpoints[chosen], key=lambda r: r.seed or 0), key=lambda r: r.metrics[selected_on])
        choices.append(DevChoice(
            task=task, system=system, lang=lang, selected_on=selected_on, step2_update=chosen,
            embeddings=checkpoints[chosen][0].embeddings or "", dev=means[chosen], dev_last=means[last],
            last_update=last, metric=first.metric, test_mean=statistics.mean(scores) if scores else None,
            test_std=(statistics.stdev(scores) if len(scores) > 1 else 0.0) if scores else None,
            test_last=_mean(at_last, first.metric) if at_last else None,
            test_selected=_mean(at_chosen, selected_on) if at_chosen else None,
            test_selected_last=_mean(at_last, selected_on) if at_last else None, step2_seed=step2_seed,
            seed=best.seed, task_model=best.task_model))
    return choices


def _on_test(c: DevChoice, headline: float | None, selected: float | None, spread: str = "") -> str:
    """A test reading: the headline metric (``spread`` after it), the selection metric in brackets where it is
    another; "-" where the task has no test file in the language."""
    if headline is None:
        return "-"
    return f"{headline:.1f}{spread}" + (f" ({selected:.1f})" if c.selected_on != c.metric else "")


def _test_metrics(c: DevChoice) -> str:
    return c.metric + (f" ({c.selected_on})" if c.selected_on != c.metric else "")


def _name(c: DevChoice) -> str:
    """The system, and a further Step-2 run's suffix (``minipost.step2-seed2``), as its jobs are named."""
    return f"{c.system}{step2_run(c.step2_seed)}"


def said(c: DevChoice) -> str:
    """One choice as Step 4 prints it."""
    test = "" if c.test_mean is None else (f"; test {_on_test(c, c.test_mean, c.test_selected)} there, "
                                           f"{_on_test(c, c.test_last, c.test_selected_last)} at the last, as "
                                           f"{_test_metrics(c)}")
    return (f"{c.task} {c.lang} dev {_name(c)}: update {c.step2_update} chosen of {c.last_update} ({c.selected_on} "
            f"{c.dev:.1f}, at the last {c.dev_last:.1f}{test}; means over seeds)")


def export_command(c: DevChoice, out: Path) -> str | None:
    """The command that writes choice ``c`` as a Hugging Face folder in ``out``/<task>-<lang>-<system> (a further
    Step-2 run's suffix after it): the classifier of the seed that reads dev best at the chosen checkpoint, the chosen
    embeddings and their tokenizer swapped in (None: a record written before the seed was kept)."""
    if c.task_model is None:
        return None
    folder = out / f"{c.task}-{c.lang}-{_name(c)}"
    return " ".join(shlex.quote(str(a)) for a in ("ds-minimodel", "hf", "export", "--model", c.task_model,
                                                  "--embeddings", c.embeddings, "--out", folder))


def table(results: Results, export_to: Path | None = None) -> str:
    """``chosen_on_dev.txt``: each choice, dev and test at it and at the last checkpoint (empty: no dev file in a
    target language); with ``export_to``, the command that writes each chosen model into a folder under it."""
    if not results.chosen_on_dev:
        return ""
    lines = []
    for task in sorted({c.task for c in results.chosen_on_dev}):
        rows = [c for c in results.chosen_on_dev if c.task == task]
        width = max(14, *(len(_name(c)) for c in rows))
        lines += [(f"The Step-2 checkpoint chosen on each target language's dev file ({task}): the highest mean over "
                   f"seeds of {rows[0].selected_on} on dev; test at it and at the last checkpoint, "
                   f"{_test_metrics(rows[0])}, means over seeds"),
                  (f"{'lang':<6} {'system':<{width}} {'chosen':>7} {'dev':>7} {'last':>6} {'dev at last':>12} "
                   f"{'test':>21} {'test at last':>13}")]
        for c in rows:
            test = _on_test(c, c.test_mean, c.test_selected, f" +- {c.test_std:.1f}" if c.test_std is not None else "")
            lines.append(f"{c.lang:<6} {_name(c):<{width}} {c.step2_update:>7} {c.dev:>7.1f} {c.last_update:>6} "
                         f"{c.dev_last:>12.1f} {test:>21} {_on_test(c, c.test_last, c.test_selected_last):>13}")
        earlier = [c for c in rows if c.step2_update < c.last_update]
        lines.append(f"{len(earlier)} of {len(rows)} choose a checkpoint before the last"
                     + (": " + ", ".join(f"{c.lang} {_name(c)} (update {c.step2_update})" for c in earlier)
                        if earlier else "") + "\n")
        commands = [f"  {c.lang} {_name(c)} (seed {c.seed}): {command}" for c in rows
                    if export_to is not None and (command := export_command(c, export_to))]
        if commands:
            lines += [("Each chosen model as a Hugging Face folder (the classifier of the seed that reads dev best "
                       "there, the chosen embeddings and tokenizer swapped in):"), *commands, ""]
    return "\n".join(lines).rstrip("\n")
