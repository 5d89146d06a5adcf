"""The error for bad user input, which the ``ldpem`` command turns into one line and exit 2.

It lives in ``ldpem.common`` so that every layer (records loading in ``ldpem.client``,
settings in ``ldpem.server``) can raise it without importing the command line.
"""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(Exception):
    """Bad input from the user (arguments, files, configuration): shown as one line, exit 2."""
