"""Domain errors. The CLI turns any NearDupError into one line on stderr and exit status 2."""

import errno


class NearDupError(Exception):
    """A problem the user can fix; the message says what happened and what to do."""

    exit_code = 2


class InputError(NearDupError):
    """The documents or paths given cannot be used."""


class WorkDirError(NearDupError):
    """The work dir is missing a stage, holds incompatible or corrupt intermediates, or is locked."""


class ParameterError(NearDupError):
    """Option values that do not fit together."""


class EngineError(NearDupError):
    """The engine that runs the tasks failed: a Dask scheduler or its workers cannot be reached or used, or lost
    work they could not redo; or a local worker process died."""


class OutputError(NearDupError):
    """The results cannot be written where they go (standard output on a full disk, a device error)."""


# the errors of a write that a full disk or a quota stopped, in words
DISK_FULL = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}


def full_disk(e: OSError) -> str:
    """What to do, for an output that a full disk or a quota stopped ('; ...'), else ''."""
    return "; free space there or write it to another folder" if e.errno in DISK_FULL else ""
