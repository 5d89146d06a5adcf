"""The error type the ``ldpem`` command turns into a one-line message and a non-zero exit."""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(Exception):
    """Bad input from the user (arguments, files, configuration): shown as one line, exit 2."""
