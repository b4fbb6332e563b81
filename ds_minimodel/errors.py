"""The one exception type for bad user input, and how command lines report it."""


import sys


class InputError(ValueError):
    """A bad user input: the message names the file and the problem."""


def report(err: InputError) -> int:
    """What every command line does with bad input: one line on stderr, no traceback, exit status 2."""
    print(f"error: {err}", file=sys.stderr, flush=True)
    return 2
