"""The training stages of the method: Steps 1 and 1b (pretrain), 2 (adapt), 3 (finetune)."""
