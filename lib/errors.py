"""The errors a user sees as one line, never as a traceback: lib/cli.run prints their message and exits.

Each is raised where the mistake is found, in whatever layer; all of them are defined here, below every layer,
so that no layer needs the command line to raise one.
"""


class UsageError(Exception):
    """A run that cannot go on as asked (an unavailable device, a run folder in use, a loss that became NaN, a
    batch too small for the processes). The message is one line, meant for the user."""


class TrainingStopped(UsageError):
    """Training ended early (a NaN loss, a failed write, a corpus changed under the run). The last good checkpoint
    is kept."""


class CorpusError(UsageError):
    """A corpus or input file that cannot be used (missing, binary, not UTF-8, malformed)."""


class DataMissingError(UsageError):
    """An evaluation data file is not there."""


class DataFormatError(ValueError):
    """An evaluation data file is malformed; the message names the file and the line (or the JSON key)."""


class ModelLoadError(Exception):
    """A model folder that cannot be loaded (missing, or with missing or mismatched weights)."""


# A one-line error echoes what it found (a header, a cell, a label); a file's 4 KB header would fill the terminal.
SHOWN_START, SHOWN_END = 200, 100  # characters kept of a longer message: where (file, line, what) and what to do


def one_line(message: str) -> str:
    """The message as lib/cli.run prints it: whole up to SHOWN_START + SHOWN_END + 40 characters, else its start
    and its end, the middle (the echoed input) replaced by how many characters were left out."""
    if len(message) <= SHOWN_START + SHOWN_END + 40:
        return message
    left_out = len(message) - SHOWN_START - SHOWN_END
    return f"{message[:SHOWN_START]} [... {left_out:,} characters ...] {message[-SHOWN_END:]}"
