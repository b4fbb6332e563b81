"""Task data for finetuning (Step 3) and zero-shot evaluation (Step 4) of Marchisio et al. (2023), Sec. 3.

* `readers`: the distribution formats (MultiNLI, XNLI, PAWS-X, SQuAD/MLQA/XQuAD, CoNLL-U, our JSONL/TSV) -> examples
* `features`: classification and tagging examples -> padded token-id arrays
* `qa`: extractive-QA windows and answer-span mapping, MLQA's official F1 / exact match

Import the submodule you need; `readers` needs only the standard library.
"""
