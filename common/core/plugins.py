"""Models and mechanisms from outside the package, loaded where the registries live
(docs/EXTENDING.md).

``LDPEM_PLUGINS`` names Python modules, comma-separated, each of which registers models
(``register_model``) or mechanisms (``register_mechanism``) when imported. Every process
that builds a model or a mechanism needs them — the command line, the coordinator, the
agents, the forecast's pool workers and Dask workers — so the registries load them
themselves: their first lookup in a process calls ``ensure_plugins``. The executors
also hand the plugins their own process loaded to their workers (``plugin_modules``), so
that a Dask worker started with another environment builds the same models; that includes
a module outside ldpem that registered a model or mechanism when a script or notebook
imported it directly (``note_registration``, called by the registries).
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Iterable, Mapping

from ldpem.common.core.errors import UserError

__all__ = [
    "PLUGINS_ENV",
    "class_path",
    "ensure_plugins",
    "import_plugins",
    "load_plugins",
    "note_registration",
    "plugin_modules",
]

PLUGINS_ENV = "LDPEM_PLUGINS"

#: The modules this process imported as plugins, in order (from the environment or given).
_LOADED: list[str] = []
#: Modules outside ldpem whose import registered a model or mechanism, in order.
_REGISTERED: list[str] = []
#: The ``LDPEM_PLUGINS`` value ``ensure_plugins`` last loaded, so that it reads it once.
_SEEN: list[str | None] = []
#: Held while plugins are imported: a plugin whose import asks a registry (through another
#: of our modules) must not start the loading again.
_LOCK = threading.RLock()
_LOADING = threading.local()


def plugin_names(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The module names ``LDPEM_PLUGINS`` lists (empty entries dropped)."""
    return [name.strip() for name in environ.get(PLUGINS_ENV, "").split(",") if name.strip()]


def import_plugins(names: Iterable[str]) -> list[str]:
    """Import the modules ``names`` (each once per process); returns them. UserError, one
    line naming the module, when one cannot be imported."""
    names = list(names)
    with _LOCK:
        outer = getattr(_LOADING, "active", False)
        _LOADING.active = True
        try:
            for name in names:
                if name in _LOADED:
                    continue
                try:
                    importlib.import_module(name)
                except Exception as error:  # any failure of a plugin's import is the user's
                    detail = " ".join(str(error).split())[:200]
                    raise UserError(
                        f"{PLUGINS_ENV}: cannot import {name!r} ({type(error).__name__}: {detail})"
                    ) from None
                _LOADED.append(name)
        finally:
            _LOADING.active = outer
    return names


def load_plugins(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Import the modules named in ``LDPEM_PLUGINS`` of ``environ``; their names."""
    return import_plugins(plugin_names(environ))


def ensure_plugins() -> None:
    """Load ``LDPEM_PLUGINS`` if this process has not yet loaded its current value: the
    registries call it before every lookup (a dictionary read once loaded)."""
    value = os.environ.get(PLUGINS_ENV)
    if _SEEN and _SEEN[0] == value:
        return
    if getattr(_LOADING, "active", False):
        return  # a plugin being imported asked a registry: its own import goes on
    with _LOCK:
        if _SEEN and _SEEN[0] == value:
            return
        load_plugins({PLUGINS_ENV: value} if value is not None else {})
        _SEEN[:] = [value]


def class_path(cls: type) -> str:
    """``module.QualifiedName``: what the registries compare to tell two classes apart. The
    qualified name alone is not enough (a plugin's ``LocalTruncation`` is not ldpem's), and
    the class object is too much: a module imported again makes a new, equal class."""
    return f"{cls.__module__}.{cls.__qualname__}"


def note_registration(module: str) -> None:
    """Remember that importing ``module`` registered a model or mechanism (the registries
    call this), so that workers import it too. ldpem's own modules need not be handed on,
    and ``__main__`` cannot be: a script's own registrations stay in its process."""
    if module == "__main__" or module == "ldpem" or module.startswith("ldpem."):
        return
    if module not in _REGISTERED:
        _REGISTERED.append(module)


def plugin_modules() -> tuple[str, ...]:
    """The plugin modules this process has imported (after loading its own), and the
    other modules whose import registered a model or mechanism, for a worker in another
    process to import the same (``ldpem.common.planning.executor``)."""
    ensure_plugins()
    return (*_LOADED, *(m for m in _REGISTERED if m not in _LOADED))
