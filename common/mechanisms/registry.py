"""The mechanism registry: every part of ldpem takes its mechanisms from here
(docs/EXTENDING.md).

``register_mechanism`` (a class decorator) checks a class's declarations once and makes it
available by its name; the CLI's choices, the wire's validation, the protocol, the
coordinator's policy, the agent, the planner and the audit take their mechanisms from
``get_mechanism`` / ``mechanism_names`` and never compare a name with a literal.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from dataclasses import MISSING
from typing import ClassVar, TypeVar, get_args, get_origin

from ldpem.common.core.plugins import class_path, ensure_plugins, note_registration
from ldpem.common.mechanisms.base import PUBLIC_FIELDS, Mechanism, NoiseSite, ScaleRule
from ldpem.common.mechanisms.secagg_contract import SharedNoise

__all__ = ["get_mechanism", "mechanism_names", "register_mechanism"]

MechanismT = TypeVar("MechanismT", bound=type[Mechanism])

_MECHANISMS: dict[str, type[Mechanism]] = {}
#: A name is a CLI choice, a JSON value and a ledger key: plain, short, lower case.
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")


#: The class attributes a mechanism declares itself by, with the type to declare each as
#: (``ClassVar``: a dataclass field would be a value each instance could set).
DECLARATIONS = {
    "name": "ClassVar[str]",
    "label": "ClassVar[str]",
    "noise_site": "ClassVar[NoiseSite]",
    "needs": "ClassVar[Needs]",
    "scale_rule": "ClassVar[ScaleRule | None]",
    "per_holder_scale": "ClassVar[bool]",
    "federated": "ClassVar[bool]",
}
#: A ClassVar annotation written as text (``from __future__ import annotations``).
_CLASSVAR_TEXT = re.compile(r"\s*(typing\.)?ClassVar\b")


def _is_classvar(annotation: object) -> bool:
    if isinstance(annotation, str):
        return _CLASSVAR_TEXT.match(annotation) is not None
    return annotation is ClassVar or get_origin(annotation) is ClassVar


def _check_declarations(cls: type[Mechanism], name: str) -> None:
    """The declarations are class attributes, not fields, and a class that adds a field is
    a dataclass of its own. TypeError, one line saying what to write."""
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for declaration, kind in DECLARATIONS.items():
        if declaration in fields:
            raise TypeError(
                f"mechanism {name}: {declaration} is a dataclass field; declare it as a "
                f"class attribute, {declaration}: {kind} = ..."
            )
    for attribute, annotation in inspect.get_annotations(cls).items():
        if attribute not in fields and not _is_classvar(annotation):
            raise TypeError(
                f"mechanism {name}: {cls.__name__} adds the field {attribute!r} but is not a "
                "dataclass itself: decorate it with @dataclass(frozen=True, kw_only=True) "
                "too, or make it a ClassVar"
            )


def _check_fields(cls: type[Mechanism], name: str) -> None:
    """The class declares, as dataclass fields, each public value it needs, and every other
    field it may be built without has a default. TypeError naming the missing field."""
    required = list(PUBLIC_FIELDS[cls.needs])
    if cls.noise_site == "shares":
        required.append("t_min")
    if cls.noise_site != "nowhere":
        required.append("noise_std")
    declared_as_dataclass: bool = dataclasses.is_dataclass(cls)  # no narrowing: cls stays
    if not declared_as_dataclass:
        fields = ", ".join(required) or "none"
        raise TypeError(
            f"mechanism {name}: declare it as a @dataclass(frozen=True, kw_only=True) whose "
            f"fields are its public values ({fields})"
        )
    _check_declarations(cls, name)
    declared = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    for wanted in required:
        if wanted not in declared:
            why = f"needs = {cls.needs!r}" if wanted in PUBLIC_FIELDS[cls.needs] else ""
            why = why or f"noise_site = {cls.noise_site!r}"
            raise TypeError(
                f"mechanism {name}: {why} but it declares no field {wanted!r} "
                f"(its fields: {', '.join(declared) or 'none'})"
            )
    for field in declared.values():
        defaulted = (field.default, field.default_factory) != (MISSING, MISSING)
        if not defaulted and field.name not in required:
            raise TypeError(
                f"mechanism {name}: field {field.name!r} is not one of the public values "
                f"it is built from ({', '.join(required) or 'none'}): give it a default"
            )
    keyword_only = all(field.kw_only for field in declared.values())
    if not (cls.__dataclass_params__.frozen and keyword_only):  # type: ignore[attr-defined]
        raise TypeError(f"mechanism {name}: declare it as a @dataclass(frozen=True, kw_only=True)")


def register_mechanism(cls: MechanismT) -> MechanismT:
    """Class decorator: make the ``Mechanism`` subclass ``cls`` available by its ``name``.
    Its declarations are checked here, once; another class under a taken name is an error
    (a plugin's subclass of a built-in, under the built-in's class name too), the same class
    again (its module imported again: same module, same qualified name) is not."""
    if not (isinstance(cls, type) and issubclass(cls, Mechanism)):
        raise TypeError(f"a mechanism must be a Mechanism subclass, got {cls!r}")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"mechanism name must match {_NAME.pattern}, got {name!r}")
    if getattr(cls, "noise_site", None) not in get_args(NoiseSite):
        raise ValueError(f"mechanism {name}: noise_site must be one of {get_args(NoiseSite)}")
    if cls.needs not in ("scale", "clip", None):
        raise ValueError(f"mechanism {name}: needs must be 'scale', 'clip' or None")
    if (cls.needs == "scale") != (cls.scale_rule in get_args(ScaleRule)):
        raise ValueError(f"mechanism {name}: a scale_rule goes with needs = 'scale'")
    if (cls.noise_site == "shares") != issubclass(cls, SharedNoise):
        raise ValueError(
            f"mechanism {name}: noise shares go with the SharedNoise interface "
            "(ldpem.common.mechanisms.secagg_contract), and only they"
        )
    _check_fields(cls, name)
    known = _MECHANISMS.get(name)
    if known is not None and class_path(known) != class_path(cls):
        raise ValueError(
            f"mechanism name {name!r} is taken by {class_path(known)}: "
            f"give {class_path(cls)} another name"
        )
    _MECHANISMS[name] = cls
    note_registration(cls.__module__)
    return cls


def get_mechanism(name: str) -> type[Mechanism]:
    """The mechanism class registered as ``name`` (``LDPEM_PLUGINS`` loaded first)."""
    ensure_plugins()
    try:
        return _MECHANISMS[name]
    except KeyError:
        raise ValueError(f"mechanism must be one of {mechanism_names()}, got {name!r}") from None


def mechanism_names(*, federated: bool | None = None) -> tuple[str, ...]:
    """The registered mechanisms' names in registration order; ``federated``: only those a
    federated run may (True) or may not (False) use."""
    ensure_plugins()
    return tuple(
        name for name, cls in _MECHANISMS.items() if federated is None or cls.federated == federated
    )
