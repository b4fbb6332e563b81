"""The one exception type for bad user input, how command lines report it, and the checks whose messages every
reader of a file shares."""


import errno
import re
import sys
from pathlib import Path


class InputError(ValueError):
    """A bad user input: the message names the file and the problem."""


class TrainingError(RuntimeError):
    """A run that cannot go on (non-finite loss, a checkpoint that cannot be written): the message names the run
    folder, what happened and the last good checkpoint."""


DISK_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM})
"""What the disk or its permissions refuse (full, over quota, a file over its size limit, read-only, not allowed): a fault of the machine, told in
one line, not a bug of ours."""


def disk_fault(err: OSError) -> TrainingError | None:
    """One line for a write the disk refused (``DISK_FAULTS``), naming the path; None for any other OSError."""
    if err.errno not in DISK_FAULTS:
        return None
    where = err.filename or "a file"
    return TrainingError(f"{where}: {err.strerror.lower() if err.strerror else 'refused'} (errno {err.errno}); files "
                         "written before it are whole (every file is written whole or not at all): free space or fix "
                         "the permissions, then run the same command again")


def report(err: Exception) -> int:
    """What every command line does with bad input (exit status 2) or a run that had to stop (exit status 1): one
    line on stderr, no traceback."""
    print(f"error: {err}", file=sys.stderr, flush=True)
    return 2 if isinstance(err, InputError) else 1


def require_file(path: str | Path, what: str, where: str = "") -> Path:
    """``path`` as a Path when it is a file; otherwise an InputError saying whether it is a folder or absent
    (``what``: "corpus file", "task file")."""
    path, context = Path(path), f" ({where})" if where else ""
    if path.is_dir():
        raise InputError(f"{path}: a folder, not a {what}{context}")
    if not path.is_file():
        raise InputError(f"{path}: {what} not found{context}")
    return path


def load_error(path: str | Path, err: Exception) -> InputError:
    """One line for a file ``torch.load(..., weights_only=True)`` could not read. torch's own message for a file it
    refuses is several lines of advice ending in loading it with ``weights_only=False``, which would run its code:
    only the reason is kept. Any other failure is a damaged or foreign file."""
    text = str(err)
    if "WeightsUnpickler" in text or "weights_only" in text:
        found = re.search(r"WeightsUnpickler error:\s*(.+)", text)
        lines = [line.strip() for line in (found.group(1) if found else text).splitlines() if line.strip()]
        reason = (lines[0] if lines else type(err).__name__).split(" Please use", 1)[0].rstrip(". ")
        return InputError(f"{path}: refused: not loadable without running code from it ({reason})")
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(err).__name__)
    return InputError(f"{path}: cannot read the weights ({type(err).__name__}: {first}); truncated, corrupted or "
                      "not a weights file")
