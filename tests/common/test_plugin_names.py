"""A plugin cannot take a name a different class holds (issue 43, finding 15): the
registries compared class names only, so a plugin's own ``LocalTruncation`` registered as
``local`` (with twice the sensitivity) and a subclass named ``GaussianMixture`` registered
as ``gmm`` silently replaced the shipped ones, in every process. They are now refused with
one line; the same class registered again (its module imported again) is not."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ldpem.common.core import plugins
from ldpem.common.mechanisms import LocalTruncation, get_mechanism
from ldpem.common.mechanisms import registry as mechanism_registry
from ldpem.common.models import get_model
from ldpem.common.models import registry as model_registry
from ldpem.common.models.gmm import GaussianMixture

#: A plugin's own mechanism class, named like the built-in and registered as ``local``,
#: whose per-record bound (so its calibrated noise) is twice the shipped one.
TAKES_LOCAL = """
    from dataclasses import dataclass

    from ldpem.common.mechanisms import register_mechanism
    from ldpem.common.mechanisms.local import LocalTruncation as Shipped


    @register_mechanism
    @dataclass(frozen=True, kw_only=True)
    class LocalTruncation(Shipped):
        name = "local"

        def record_bound(self, d: int) -> float:
            return 2 * super().record_bound(d)
"""
#: A subclass of the shipped GMM under the shipped class's own name, registered as ``gmm``.
TAKES_GMM = """
    from ldpem.common.models import register_model
    from ldpem.common.models.gmm import GaussianMixture as Shipped


    class GaussianMixture(Shipped):
        pass


    register_model(GaussianMixture())
"""
#: A plugin of its own name, imported twice.
OWN_NAME = """
    from dataclasses import dataclass

    from ldpem.common.mechanisms import register_mechanism
    from ldpem.common.mechanisms.local import LocalTruncation as Shipped


    @register_mechanism
    @dataclass(frozen=True, kw_only=True)
    class LocalTwice(Shipped):
        name = "local-twice"
"""
ATTACKS = {
    "taken_local": (TAKES_LOCAL, "mechanism name 'local' is taken by "),
    "taken_gmm": (TAKES_GMM, "model name 'gmm' is taken by "),
}


def write_plugin(directory: Path, module: str, source: str) -> None:
    (directory / f"{module}.py").write_text(textwrap.dedent(source))


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp_path`` on sys.path, and registries that a registration (refused or not) in
    the test leaves as they were for the other tests of this process."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(mechanism_registry, "_MECHANISMS", dict(mechanism_registry._MECHANISMS))
    monkeypatch.setattr(model_registry, "_MODELS", dict(model_registry._MODELS))
    monkeypatch.setattr(plugins, "_REGISTERED", list(plugins._REGISTERED))
    for module in (*ATTACKS, "own_name"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    return tmp_path


@pytest.mark.parametrize("module", ATTACKS)
def test_a_different_class_under_a_taken_name_is_refused(isolated: Path, module: str) -> None:
    source, refusal = ATTACKS[module]
    write_plugin(isolated, module, source)
    with pytest.raises(ValueError) as caught:
        importlib.import_module(module)
    message = str(caught.value)
    assert message.startswith(refusal) and "\n" not in message
    # It names both classes by module, not only by their (equal) class names.
    assert f"give {module}." in message and "ldpem.common." in message
    assert get_mechanism("local") is LocalTruncation
    assert type(get_model("gmm")) is GaussianMixture


def test_the_same_class_again_is_not_refused(isolated: Path) -> None:
    write_plugin(isolated, "own_name", OWN_NAME)
    module = importlib.import_module("own_name")
    first = module.LocalTwice
    # Imported again: a new class object, the same module and qualified name.
    again = importlib.reload(module).LocalTwice
    assert again is not first
    assert get_mechanism("local-twice") is again
    mechanism_registry.register_mechanism(LocalTruncation)  # a built-in, again


COMMANDS = {
    "simulate": ["simulate", "--model", "gmm", "--mechanism", "local", "--n", "2000", "--d", "2"],
    "audit": ["audit", "--mechanism", "local", "--help"],
    "coordinator": ["coordinator", "--help"],
    "client": ["client", "--help"],
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("module", ATTACKS)
def test_every_command_refuses_the_plugin_in_one_line(
    tmp_path: Path, module: str, command: str
) -> None:
    """A real ``ldpem`` process of each kind (the agent, the coordinator, the audit, the
    simulator) loads ``LDPEM_PLUGINS`` before its arguments: it stops there."""
    source, refusal = ATTACKS[module]
    write_plugin(tmp_path, module, source)
    env = {**os.environ, "LDPEM_PLUGINS": module, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "ldpem", *COMMANDS[command]],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"ldpem: error: LDPEM_PLUGINS: cannot import '{module}' (")
    assert refusal in lines[0]
