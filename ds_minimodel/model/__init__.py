"""The model: encoder and heads, losses, surgery (mini-models, embedding swaps), loading any checkpoint kind, Hugging
Face import and export."""
