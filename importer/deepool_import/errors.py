"""Exit codes and the one error type every failure becomes (docs/cli.md, `deepool import`).

The codes follow the deepool command's (cli/command_registry.h): 2 usage, 3 input refused,
5 not found; 1 when the user's own code raised or an output could not be written.
"""

EXIT_OK = 0
EXIT_FAILED = 1  # the model's code raised (loading, factory, forward), or writing failed
EXIT_USAGE = 2  # bad flags, an output that exists without --force
EXIT_REFUSED = 3  # the module cannot be expressed in the graph IR (unmappable op, shape, ...)
EXIT_UNAVAILABLE = 4  # no torch in this Python (the deepool command uses this code too)
EXIT_NOT_FOUND = 5  # no such file, module or factory


class ImportFailure(Exception):
    """A failure to report on one line, with the exit code it ends the import with."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = " ".join(str(message).split())  # one line, whatever the cause printed


def one_line(exc):
    """`Type: message` of an exception, on one line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
