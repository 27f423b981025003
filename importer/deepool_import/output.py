"""Writes the outputs only when everything passed, each through a temporary file beside it that
is renamed into place, so a failure leaves no output half-written and an existing file as it
was. Without --force an existing output is never replaced (a link, not a rename, puts the file
in place, and it fails when the name exists)."""
import os
import tempfile

from .errors import EXIT_FAILED, EXIT_USAGE, ImportFailure


def check_targets(paths, force):
    """Refuses, before any work, outputs that exist (without force) or cannot be made."""
    for flag, path in paths:
        if os.path.isdir(path):
            raise ImportFailure(EXIT_USAGE, f"{flag} {path}: is a directory")
        if os.path.lexists(path) and not force:
            raise ImportFailure(EXIT_USAGE, f"{flag} {path}: exists (--force replaces it)")
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise ImportFailure(EXIT_USAGE, f"{flag} {path}: no directory {directory}")


def _temporary(path):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # as an ordinary new file, not mkstemp's 0600
    return tmp


def write_all(outputs, force):
    """outputs: (flag, path, write(tmp_path)) triples; all are written, then all put in place."""
    staged = []
    try:
        for flag, path, write in outputs:
            tmp = _temporary(path)
            staged.append((flag, path, tmp))
            write(tmp)
        placed = []
        for flag, path, tmp in staged:
            try:
                if force:
                    os.replace(tmp, path)
                else:
                    os.link(tmp, path)
                    os.unlink(tmp)
            except FileExistsError:
                for done in placed:
                    os.unlink(done)
                raise ImportFailure(EXIT_USAGE, f"{flag} {path}: appeared while importing "
                                    "(--force replaces it)") from None
            placed.append(path)
    except OSError as e:
        raise ImportFailure(EXIT_FAILED, f"cannot write the outputs: {e}") from None
    finally:
        for _, _, tmp in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
