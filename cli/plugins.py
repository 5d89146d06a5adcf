"""Models and mechanisms from outside the package (docs/EXTENDING.md).

``LDPEM_PLUGINS`` names Python modules, comma-separated, that the ``ldpem`` command imports
before it does anything else; each registers its models (``register_model``) or mechanisms
(``register_mechanism``) when imported. Every process of a study — coordinator, agents,
``simulate``, ``plan``, ``audit`` — needs the same list, so that each knows the names the
others use. The hospital's operator sets it for its agent like any other configuration.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping

from ldpem.common.errors import UserError

__all__ = ["PLUGINS_ENV", "load_plugins"]

PLUGINS_ENV = "LDPEM_PLUGINS"


def load_plugins(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Import the modules named in ``LDPEM_PLUGINS``; their names. UserError, one line,
    when one cannot be imported."""
    names = [name.strip() for name in environ.get(PLUGINS_ENV, "").split(",") if name.strip()]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as error:  # any failure of a plugin's import is the user's to fix
            detail = " ".join(str(error).split())[:200]
            raise UserError(
                f"{PLUGINS_ENV}: cannot import {name!r} ({type(error).__name__}: {detail})"
            ) from None
    return names
