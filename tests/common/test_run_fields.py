"""One run description (``ldpem.common.protocol.run_fields``): every consumer of a run's
public fields (the study, the prediction's problem, the run request, the demo, the agent,
every command's options and the models' generators) has the declared defaults."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Iterator
from dataclasses import MISSING, fields
from typing import Any

import pytest

from ldpem.cli import build_parser
from ldpem.client.config import AgentConfig
from ldpem.common.models import get_model, model_names
from ldpem.common.planning.problem import Problem
from ldpem.common.planning.study import Study
from ldpem.common.protocol.run_fields import (
    DEFAULT_D,
    DEFAULT_MECHANISM,
    DEFAULT_MODEL,
    RUN_DEFAULTS,
    RunFields,
)
from ldpem.common.wire import RunCreate
from ldpem.demo.runner import DemoConfig

#: Every declared default by name: the run's fields, and the model, mechanism and d of a
#: study or a command that names none.
DECLARED: dict[str, Any] = {
    **{f.name: getattr(RUN_DEFAULTS, f.name) for f in fields(RunFields)},
    "model": DEFAULT_MODEL,
    "mechanism": DEFAULT_MECHANISM,
    "d": DEFAULT_D,
}

#: The options that mean something else than the run's field of their name, with their
#: own default and why.
OWN_DEFAULTS: dict[tuple[str, str], Any] = {
    # "auto" is resolved from the mechanism and K before the study or the run is made.
    ("ldpem simulate", "secagg_topology"): "auto",
    ("ldpem run create", "secagg_topology"): None,  # None: the request's own
    # The audit's claims, not a run's: every mechanism and accounting, a fixed δ and t_min.
    ("ldpem audit", "mechanism"): "all",
    ("ldpem audit", "accounting"): "all",
    ("ldpem audit", "delta"): 1e-5,
    ("ldpem audit", "t_min"): 3,
}

#: The run request's fields whose default is its own, and why.
REQUEST_OWN_DEFAULTS: dict[str, Any] = {
    # What the forecast assumes: the operator states the share, else none.
    "missing": 0.0,
    # Resolved at validation from the mechanism and K (``wire.shares.topology_resolved``).
    "secagg_topology": "auto",
}


def walk(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from walk(sub)


def disagreements(
    parsers: list[argparse.ArgumentParser],
    declared: dict[str, Any],
    own: dict[tuple[str, str], Any],
) -> list[str]:
    """Each option of ``parsers`` named after a declared field whose default is neither the
    declared one nor its listed ``own`` one (a required option has none)."""
    found = []
    for parser in parsers:
        for action in parser._actions:
            if action.dest not in declared or action.required:
                continue
            expected = own.get((parser.prog, action.dest), declared[action.dest])
            if action.default != expected:
                found.append(f"{parser.prog} --{action.dest}: {action.default!r} != {expected!r}")
    return found


PARSERS = list(walk(build_parser()))


def test_every_commands_options_default_to_the_declaration() -> None:
    assert disagreements(PARSERS, DECLARED, OWN_DEFAULTS) == []


def test_the_option_check_sees_a_stray_default() -> None:
    parser = argparse.ArgumentParser(prog="ldpem x")
    parser.add_argument("--epsilon", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=DECLARED["rounds"])
    parser.add_argument("--model", required=True)
    assert disagreements([parser], DECLARED, {}) == ["ldpem x --epsilon: 2.0 != 1.0"]
    assert disagreements([parser], DECLARED, {("ldpem x", "epsilon"): 2.0}) == []


def test_the_options_checked_cover_the_commands_that_take_a_run() -> None:
    checked = {
        parser.prog
        for parser in PARSERS
        for action in parser._actions
        if action.dest in DECLARED and not action.required
    }
    assert {"ldpem simulate", "ldpem plan", "ldpem demo", "ldpem generate"} <= checked


@pytest.mark.parametrize("cls", [Study, Problem])
def test_study_and_problem_inherit_the_run_fields(cls: type[RunFields]) -> None:
    assert issubclass(cls, RunFields)
    defaults = {f.name: f.default for f in fields(cls) if f.default is not MISSING}
    shared = {name: value for name, value in defaults.items() if name in DECLARED}
    assert shared == {name: DECLARED[name] for name in shared}


def test_a_study_defaults_to_the_declared_model_mechanism_and_d() -> None:
    study = Study()
    assert (study.model, study.mechanism, study.d) == (DEFAULT_MODEL, DEFAULT_MECHANISM, DEFAULT_D)


#: The run request's fields that state the declared default in their JSON form.
JSON_FORMS: dict[str, Any] = {
    # The (name, value) pairs as a JSON object: {"components": 3}.
    "model_options": dict,
}


def test_the_run_request_defaults_to_the_declaration() -> None:
    request = {
        name: info.get_default(call_default_factory=True)
        for name, info in RunCreate.model_fields.items()
        if name in DECLARED and not info.is_required()
    }
    assert {"epsilon", "accounting", "zeta", "snr", "schedule", "final", "mechanism"} <= set(
        request
    )
    assert "model_options" in request
    expected = {
        name: REQUEST_OWN_DEFAULTS.get(name, JSON_FORMS.get(name, _same)(DECLARED[name]))
        for name in request
    }
    assert request == expected


def _same(value: Any) -> Any:
    return value


def test_the_demo_and_the_agent_default_to_the_declaration() -> None:
    demo = {f.name: f.default for f in fields(DemoConfig) if f.name in DECLARED}
    assert demo == {name: DECLARED[name] for name in demo}
    assert set(demo) == {"model", "d", "rounds", "epsilon", "mechanism", "model_options"}
    agent = {
        f.name: f.default
        for f in fields(AgentConfig)
        if f.name in DECLARED and f.default is not MISSING
    }
    assert agent == {name: DECLARED[name] for name in ("accounting", "model_options")}


def test_the_client_commands_options_default_to_the_agents_config() -> None:
    (client,) = (parser for parser in PARSERS if parser.prog == "ldpem client")
    config = {f.name: f.default for f in fields(AgentConfig) if f.default is not MISSING}
    options = {a.dest: a.default for a in client._actions if a.dest in config}
    assert {"accounting", "dataset", "give_up", "wait"} <= set(options)
    assert disagreements([client], config, {}) == []


@pytest.mark.parametrize("name", model_names())
def test_each_models_generator_defaults_to_the_declared_snr_and_sigma(name: str) -> None:
    parameters = inspect.signature(get_model(name).generate).parameters
    assert parameters["snr"].default == DECLARED["snr"]
    assert parameters["sigma"].default == DECLARED["sigma"]


def test_a_problem_without_model_options_keeps_its_seed_key() -> None:
    # The key of the run fields declared before model_options, in their order: what the
    # prediction seeds of every existing problem were drawn from.
    problem = Problem(model="gmm", d=3, sizes=(100, 200), epsilon=0.5)
    earlier = [f.name for f in fields(RunFields) if f.name != "model_options"]
    shared = {f.name for f in fields(RunFields)}
    own = [f.name for f in fields(Problem) if f.name not in shared]
    skip = {"rounds", "schedule", "final"}
    names = [name for name in own + earlier if name not in skip]
    assert problem.seed_key == repr([(name, getattr(problem, name)) for name in names])
    assert "model_options" not in problem.seed_key


def test_a_problems_model_options_are_in_its_seed_key() -> None:
    three = Problem(model="gmmk", d=3, sizes=(100,), model_options=(("components", 3),))
    four = Problem(model="gmmk", d=3, sizes=(100,), model_options=(("components", 4),))
    assert three.seed_key != four.seed_key
    assert three.seed_key.endswith("('model_options', (('components', 3),))]")


#: The commands that run or describe a run of a model, each with its declared options.
#: Not ``ldpem plan`` (it refuses the models that declare options) nor ``ldpem audit``
#: (its claims take each model at its defaults).
MODEL_COMMANDS = {
    "ldpem simulate",
    "ldpem client",
    "ldpem generate",
    "ldpem demo",
    "ldpem run create",
}


def test_every_command_that_runs_a_model_takes_its_declared_options() -> None:
    declared = {option.name for name in model_names() for option in get_model(name).options}
    assert declared == {"components"}
    found = [parser for parser in PARSERS if parser.prog in MODEL_COMMANDS]
    assert {parser.prog for parser in found} == MODEL_COMMANDS
    for parser in found:
        options = {a.dest: a.default for a in parser._actions}
        assert {name: options.get(name, "missing") for name in declared} == dict.fromkeys(
            declared
        ), parser.prog
