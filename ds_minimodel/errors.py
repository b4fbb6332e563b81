"""The one exception type for bad user input."""


class InputError(ValueError):
    """A bad user input: the message names the file and the problem."""
