"""``LDPEM_PLUGINS`` is read in the core (``ldpem.common.core.plugins``): a module that cannot be
imported is one line naming it, the command stops before anything else, and a process
loads each plugin once."""

from __future__ import annotations

import pytest

from ldpem.cli import main
from ldpem.common.core import plugins
from ldpem.common.core.errors import UserError
from ldpem.common.mechanisms import mechanism_names, register_mechanism
from ldpem.common.planning.executor import PoolExecutor
from tests.examples.local_box import LocalBox


def test_a_missing_plugin_is_one_line_naming_it() -> None:
    with pytest.raises(UserError) as caught:
        plugins.import_plugins(["ldpem_no_such_plugin"])
    message = str(caught.value)
    assert message.startswith("LDPEM_PLUGINS: cannot import 'ldpem_no_such_plugin' (")
    assert "\n" not in message


def test_the_command_stops_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LDPEM_PLUGINS", " ldpem_no_such_plugin , ")
    assert main(["simulate", "--n", "1000", "--d", "2", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "ldpem: error: LDPEM_PLUGINS: cannot import 'ldpem_no_such_plugin'"
    )


def test_plugins_are_named_and_loaded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    assert plugins.plugin_names({"LDPEM_PLUGINS": " a.b ,, c "}) == ["a.b", "c"]
    assert plugins.plugin_names({}) == []
    # A standard-library module stands in for a plugin: imported once, then remembered.
    monkeypatch.setenv("LDPEM_PLUGINS", "colorsys")
    monkeypatch.setattr(plugins, "_LOADED", [])
    monkeypatch.setattr(plugins, "_REGISTERED", [])
    monkeypatch.setattr(plugins, "_SEEN", [])
    plugins.ensure_plugins()
    assert plugins.plugin_modules() == ("colorsys",)
    plugins.ensure_plugins()
    assert plugins.plugin_modules() == ("colorsys",)


def test_a_module_that_registered_by_import_is_handed_to_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A script or notebook that imports its plugin module directly (no LDPEM_PLUGINS):
    # the registries note the module, so that pool and Dask workers import it too.
    monkeypatch.delenv("LDPEM_PLUGINS", raising=False)
    monkeypatch.setattr(plugins, "_LOADED", [])
    monkeypatch.setattr(plugins, "_REGISTERED", [])
    monkeypatch.setattr(plugins, "_SEEN", [])
    plugins.note_registration("ldpem.common.models.gmm")  # ours: every process has it
    plugins.note_registration("__main__")  # a script's own: no other process can import it
    assert plugins.plugin_modules() == ()
    register_mechanism(LocalBox)  # what importing tests.examples.local_box does
    assert plugins.plugin_modules() == ("tests.examples.local_box",)
    with PoolExecutor(1) as pool:
        seen = pool.map(_registered_mechanisms, [0])[0]
    assert LocalBox.name in seen


def _registered_mechanisms(_: int) -> tuple[str, ...]:
    """What a pool worker finds registered (module level: a pool pickles it by name)."""
    return mechanism_names()
