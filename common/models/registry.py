"""The model registry: every part of ldpem takes its models from here (docs/EXTENDING.md).

The CLI's choices, the wire's validation, the calibration's τ, the demo, the audit, the
planner and ``generate`` all ask ``get_model`` / ``model_names``; nothing compares a model
name with a literal. A model registers itself with ``register_model`` when its module is
imported: the built-in ones through ``ldpem.common.models``, others through a plugin module
named in ``LDPEM_PLUGINS`` (``ldpem.common.core.plugins``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

from ldpem.common.core.plugins import class_path, ensure_plugins, note_registration
from ldpem.common.models.base import DEFAULT_START, Model

__all__ = ["get_model", "model_names", "register_model"]

_MODELS: dict[str, Model] = {}
#: A name is a CLI choice, a JSON value and a ledger key: plain, short, lower case.
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")

ModelT = TypeVar("ModelT", bound=Model)


def register_model(model: ModelT) -> ModelT:
    """Make ``model`` (an instance of a ``Model`` subclass) available by its ``name``;
    returns it. Registering another class under a taken name is an error (a plugin's
    subclass of a built-in, under the built-in's class name too); registering the same
    class again (its module imported again: same module, same qualified name) is not."""
    if not isinstance(model, Model):
        raise TypeError(f"model must be a Model instance, got {type(model).__name__}")
    name = getattr(model, "name", None)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"model name must match {_NAME.pattern}, got {name!r}")
    rule = model.start_rule
    if not isinstance(rule, str) or not _NAME.fullmatch(rule):
        raise ValueError(f"model {name}: start_rule must match {_NAME.pattern}, got {rule!r}")
    kind = type(model)
    own = kind.start is not Model.start or kind.start_reads_data
    if own and rule == DEFAULT_START:
        raise ValueError(f"model {name} has its own start: name its rule (start_rule)")
    reads = kind.start_statistics is not Model.start_statistics
    if kind.start_reads_data and not (reads and kind.start_from is not Model.start_from):
        raise ValueError(
            f"model {name}: a start that reads data needs start_statistics and start_from"
        )
    for option in model.options:
        if not _NAME.fullmatch(option.name) or not option.low <= option.default <= option.high:
            raise ValueError(
                f"model {name}: option {option.name!r} needs a plain name and "
                f"low <= default <= high, got {option!r}"
            )
    known = _MODELS.get(name)
    if known is not None and class_path(type(known)) != class_path(kind):
        raise ValueError(
            f"model name {name!r} is taken by {class_path(type(known))}: "
            f"give {class_path(kind)} another name"
        )
    _MODELS[name] = model
    note_registration(type(model).__module__)
    return model


def get_model(name: str, options: Mapping[str, int] | None = None) -> Model:
    """The model registered as ``name`` (``LDPEM_PLUGINS`` loaded first), with its declared
    ``options`` set (``Model.configured``; the registered instance has their defaults)."""
    ensure_plugins()
    try:
        model = _MODELS[name]
    except KeyError:
        raise ValueError(f"model must be one of {model_names()}, got {name!r}") from None
    return model.configured(options) if options else model


def model_names() -> tuple[str, ...]:
    """The registered models' names, in registration order (the built-in ones first)."""
    ensure_plugins()
    return tuple(_MODELS)
