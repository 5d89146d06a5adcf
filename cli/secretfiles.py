"""Token and key files: written readable by their owner only, refused when they are not.

A token or private key that group or others can read has leaked to every account of the
machine (and to whatever backs it up with those permissions), so the coordinator, the agent
and ``ldpem run`` refuse such a file with the fix, instead of using it without a word.
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from ldpem.common.core.errors import UserError

__all__ = ["check_private", "read_secret", "write_secret"]

#: Permission bits that let anyone but the owner read, write or run the file.
_NOT_OWNER = stat.S_IRWXG | stat.S_IRWXO


def _refusal(path: Path, what: str, mode: int) -> UserError:
    return UserError(
        f"{path}: the {what} is accessible to group or others (mode {mode:03o}); "
        f"chmod 600 {shlex.quote(str(path))}"
    )


def check_private(path: Path, what: str) -> None:
    """UserError unless ``path`` is a file only its owner may access (skipped on Windows,
    whose permission bits say nothing)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except OSError as error:
        raise UserError(f"{path}: cannot read the {what} ({error.strerror})") from None
    if os.name != "nt" and mode & _NOT_OWNER:
        raise _refusal(path, what, mode)


def read_secret(path: Path, what: str) -> str:
    """The stripped content of the token file ``path``, refused unless only its owner may
    access it. Errors are one line naming the file; the content is never in them."""
    try:
        with path.open() as f:
            # The mode of the file actually read, not of a name that could be swapped.
            mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
            if os.name != "nt" and mode & _NOT_OWNER:
                raise _refusal(path, what, mode)
            return f.read().strip()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: the {what} is not UTF-8 text") from None
    except OSError as error:
        raise UserError(f"{path}: cannot read the {what} ({error.strerror})") from None


def write_secret(path: Path, content: str | bytes, what: str) -> None:
    """Write ``content`` to the new file ``path`` with mode 0600, durably; never replaces
    an existing file (a token in use would silently stop working) and leaves nothing
    behind when the write fails (an empty token file would be refused at the next start)."""
    data = content.encode() if isinstance(content, str) else content
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UserError(f"{path}: exists; refusing to overwrite a {what}") from None
    except OSError as error:
        raise UserError(f"{path}: cannot write the {what} ({error.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as error:
        path.unlink(missing_ok=True)
        raise UserError(f"{path}: cannot write the {what} ({error.strerror})") from None
