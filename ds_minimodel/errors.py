"""The one exception type for bad user input, and how command lines report it."""


import sys


class InputError(ValueError):
    """A bad user input: the message names the file and the problem."""


class TrainingError(RuntimeError):
    """A run that cannot go on (non-finite loss, a checkpoint that cannot be written): the message names the run
    folder, what happened and the last good checkpoint."""


def report(err: Exception) -> int:
    """What every command line does with bad input (exit status 2) or a run that had to stop (exit status 1): one
    line on stderr, no traceback."""
    print(f"error: {err}", file=sys.stderr, flush=True)
    return 2 if isinstance(err, InputError) else 1
