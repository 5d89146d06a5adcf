"""A package's names imported on first use (PEP 562 module ``__getattr__``).

``ldpem``, ``ldpem.common`` and ``ldpem.common.secagg`` name a surface that lives in their
submodules without importing them: ``ldpem client`` should not pay for numpy before it
needs it, a core module (which runs ``ldpem.common`` first) should not load pydantic or the
planner, and secagg's run values should not load the cryptography.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping


def lazy_names(
    package: str, surface: Mapping[str, str], namespace: MutableMapping[str, object]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose name ``n`` is
    ``surface[n]``'s attribute ``n``, imported on the first lookup and kept in
    ``namespace`` (the package's ``globals()``) so the next lookup does not come here."""

    def getattr_(name: str) -> object:
        # AttributeError for anything else, so that `from package import submodule` goes
        # on to import the submodule.
        if name not in surface:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(surface[name]), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *surface})

    return getattr_, dir_
