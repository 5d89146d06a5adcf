"""docker-compose.yml against the Compose Specification schema, and the demo's own rules:
images pinned by digest, restart policies, ledgers on volumes of their own that the
README's reset command spares, and an image that keeps no source (the Dockerfile's stages).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from ldpem.common.wire import RunCreate

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
SCHEMA = Path(__file__).with_name("compose-spec.json")
#: An image reference pinned by digest; the tag, kept for the reader, is optional.
PINNED = re.compile(r"[a-z0-9./-]+(:[\w.-]+)?@sha256:[0-9a-f]{64}")
#: The label of the volumes the README's reset command removes.
RESET_LABEL = "ldpem.reset"


def dockerfile_stages() -> list[tuple[str, list[str]]]:
    """The Dockerfile's stages: (the FROM line, its instructions), continuation lines
    joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    stages: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            stages.append((line, []))
        elif stages:
            stages[-1][1].append(line)
    return stages


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict)
    return document


def _hospitals(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The default study's hospitals (profile services, e.g. "warehouse", are apart)."""
    return {
        name: service
        for name, service in compose["services"].items()
        if "client" in " ".join(service.get("command", [])) and "profiles" not in service
    }


def test_compose_file_matches_the_compose_spec_schema(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft201909Validator(
        schema, format_checker=jsonschema.Draft201909Validator.FORMAT_CHECKER
    )
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors
    )


def test_schema_rejects_a_broken_compose_file(compose: dict[str, Any]) -> None:
    """The validation has teeth: an unknown service key and a bad depends_on fail."""
    schema = json.loads(SCHEMA.read_text())
    broken = json.loads(json.dumps(compose))
    broken["services"]["coordinator"]["helthcheck"] = {}
    broken["services"]["run"]["depends_on"]["coordinator"]["condition"] = "healthy"
    errors = list(jsonschema.Draft201909Validator(schema).iter_errors(broken))
    assert any("helthcheck" in e.message for e in errors)
    assert ["services", "run", "depends_on"] in [list(e.absolute_path) for e in errors]


def test_coordinator_has_a_healthcheck_and_the_others_wait_for_it(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    coordinator = services["coordinator"]
    assert coordinator["command"][0] == "coordinator"
    assert "/healthz" in " ".join(coordinator["healthcheck"]["test"])
    assert services["run"]["depends_on"]["coordinator"]["condition"] == "service_healthy"
    assert services["run"]["command"][:2] == ["run", "create"]
    for name, service in _hospitals(compose).items():
        condition = service["depends_on"]["run"]["condition"]
        assert condition == "service_completed_successfully", name


def _base_image_default() -> str:
    match = re.search(r"^ARG BASE_IMAGE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert match is not None, "the Dockerfile has no ARG BASE_IMAGE=... default"
    return match.group(1)


def test_every_service_uses_the_image_built_from_this_repository(
    compose: dict[str, Any],
) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert _base_image_default().startswith("python:3.11-slim@")
    assert re.search(r"^FROM \$\{BASE_IMAGE\} AS deps$", dockerfile, re.MULTILINE)
    assert 'ENTRYPOINT ["ldpem"]' in dockerfile
    assert re.search(r"^USER ldpem$", dockerfile, re.MULTILINE)
    for name, service in compose["services"].items():
        if service.get("image", "").startswith("postgres:"):
            continue  # the warehouse profile's database: the official postgres image
        assert service["build"]["context"] == ".", name
        assert "BASE_IMAGE" in service["build"]["args"], name


def test_images_are_pinned_by_digest(compose: dict[str, Any]) -> None:
    base = _base_image_default()
    assert PINNED.fullmatch(base), base
    for name, service in compose["services"].items():
        if "build" in service:
            # The default of LDPEM_BASE_IMAGE must be the Dockerfile's: an empty build arg
            # would override the Dockerfile's default, so compose repeats it.
            arg = service["build"]["args"]["BASE_IMAGE"]
            assert arg == f"${{LDPEM_BASE_IMAGE:-{base}}}", name
        else:
            assert PINNED.fullmatch(service["image"]), (name, service["image"])
    # Every FROM is the pinned base or an earlier stage of this file.
    names: list[str] = []
    for line, _ in dockerfile_stages():
        words = line.split()
        assert words[1] == "${BASE_IMAGE}" or words[1] in names, line
        if len(words) == 4 and words[2].upper() == "AS":
            names.append(words[3])
    assert PINNED.fullmatch("postgres:16@sha256:" + "0" * 64)
    assert not PINNED.fullmatch("postgres:16") and not PINNED.fullmatch("python:3.11-slim")


def test_every_service_has_a_restart_policy(compose: dict[str, Any]) -> None:
    """Long-running servers restart unless stopped (a crash, a reboot); an agent on
    failure only (it exits 0 when its run is over); one-shot services never (a second
    `run create` would be refused)."""
    for name, service in compose["services"].items():
        command = service.get("command", [])
        words = " ".join(command if isinstance(command, list) else [command])
        if name in ("coordinator", "warehouse"):
            expected = {"unless-stopped", "always"}
        elif "client" in words:
            expected = {"on-failure"} | {f"on-failure:{n}" for n in range(1, 100)}
        else:
            expected = {"no"}
        assert service.get("restart") in expected, (name, service.get("restart"))


def _volume(mounts: list[str], target: str) -> str | None:
    """The named volume ``mounts`` mount at ``target`` (its first path segment)."""
    for mount in mounts:
        source, path = mount.split(":")[:2]
        if path == target and not source.startswith("."):
            return source
    return None


def _state_dir(service: dict[str, Any]) -> str:
    command = [str(word) for word in service["command"]]
    if command and command[0] == "client":
        words = command
    else:  # sh -c "ldpem generate … && exec ldpem client …"
        words = shlex.split(" ".join(command).replace("$$", "$"))
    return words[words.index("--state") + 1]


def test_ledgers_have_volumes_of_their_own_that_the_reset_spares(
    compose: dict[str, Any],
) -> None:
    agents = {
        name: service
        for name, service in compose["services"].items()
        if "client" in " ".join(service.get("command", []))
    }
    assert len(agents) == 4  # hospital-a, -b, -c and the warehouse's hospital-d
    ledgers = set()
    for name, service in agents.items():
        state = _state_dir(service)
        assert state.startswith("/state/"), (name, state)
        ledger = _volume(service["volumes"], "/state")
        assert ledger == f"{name}-ledger", (name, ledger)
        assert all(
            not mount.startswith(f"{ledger}:")
            for s in compose["services"].values()
            if s is not service
            for mount in s.get("volumes", [])
        ), ledger
        records = _volume(service["volumes"], "/data")
        assert records != ledger
        ledgers.add(ledger)
    # The reset removes exactly the volumes labelled ldpem.reset=true: all but the ledgers.
    volumes = compose["volumes"]
    labelled = {
        name
        for name, volume in volumes.items()
        if ((volume or {}).get("labels") or {}).get(RESET_LABEL) == "true"
    }
    assert labelled == set(volumes) - ledgers
    assert ledgers <= set(volumes)


def test_every_agent_names_the_model_of_its_run(compose: dict[str, Any]) -> None:
    """``ldpem client`` requires --model (it reads its records for that model before it
    contacts anyone); each agent's must be its run's."""
    runs = {
        "run.json": RunCreate.model_validate_json((ROOT / "deploy" / "run.json").read_text()),
        "run-warehouse.json": RunCreate.model_validate_json(
            (ROOT / "deploy" / "run-warehouse.json").read_text()
        ),
    }
    models = {h.name: run.model for run in runs.values() for h in run.hospitals}
    agents = 0
    for name, service in compose["services"].items():
        command = [str(word) for word in service.get("command", [])]
        if command[:1] == ["client"]:
            words = command
        elif "ldpem client" in " ".join(command):
            words = shlex.split(" ".join(command).replace("$$", "$"))
            words = words[words.index("client") :]
        else:
            continue
        agents += 1
        assert "--model" in words, name
        assert words[words.index("--model") + 1] == models[name], name
    assert agents == 4


def test_the_readme_reset_command_spares_the_ledgers() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Run with docker compose", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    reset = [block for block in blocks if "docker volume rm" in block]
    assert len(reset) == 1, blocks
    commands = [line.split("#")[0].strip() for line in reset[0].splitlines()]
    assert commands == [
        "docker compose down",
        f"docker volume rm $(docker volume ls -q --filter label={RESET_LABEL}=true)",
    ]
    # The only `down -v` the section mentions is the one that says it deletes the ledgers.
    for line in section.splitlines():
        if "down -v" in line:
            assert "deletes the ledgers" in line, line
    header = COMPOSE.read_text().split("\nx-ldpem:", 1)[0]
    assert f"label={RESET_LABEL}=true" in header


def test_the_image_keeps_no_source() -> None:
    """A build stage makes the wheel from the package folders; the image's own stage copies
    in only what that stage installed, and no stage copies the whole checkout."""
    stages = dockerfile_stages()
    assert [line.split()[-1] for line, _ in stages[:2]] == ["deps", "build"]
    for line, instructions in stages:
        for instruction in instructions:
            if instruction.upper().startswith(("COPY", "ADD")):
                sources = instruction.split()[1:-1]
                assert "." not in sources and "./" not in sources, (line, instruction)
    deps, build, image = (instructions for _, instructions in stages)
    assert any(
        "pip install --require-hashes --no-deps --requirement" in i and "runtime.lock" in i
        for i in deps
    )
    assert any("pip wheel" in i and "pip install --no-deps" in i for i in build)
    assert stages[2][0] == "FROM deps"
    copies = [i for i in image if i.upper().startswith(("COPY", "ADD"))]
    assert copies == ["COPY --from=build /install/ /opt/ldpem/"]


def test_hospitals_are_one_study_with_their_own_tokens_and_volumes(
    compose: dict[str, Any],
) -> None:
    hospitals = _hospitals(compose)
    assert len(hospitals) >= 3
    run = RunCreate.model_validate_json((ROOT / "deploy" / "run.json").read_text())
    enrolled = {h.name: h for h in run.hospitals}
    assert set(hospitals) == set(enrolled)
    tokens = [service["environment"]["LDPEM_TOKEN"] for service in hospitals.values()]
    assert len(set(tokens)) == len(tokens)
    volumes = [tuple(service["volumes"]) for service in hospitals.values()]
    assert len(set(volumes)) == len(volumes)
    parts = set()
    for name, service in hospitals.items():
        assert service["environment"]["LDPEM_TOKEN"] == enrolled[name].token
        words = shlex.split(service["command"][0].replace("$$", "$"))
        generate = words[: words.index("&&")]
        assert generate[:2] == ["ldpem", "generate"]
        option = dict(zip(generate[2::2], generate[3::2], strict=True))
        assert option["--model"] == run.model
        assert int(option["--d"]) == run.d
        assert int(option["--n"]) == enrolled[name].records
        assert int(option["--parts"]) == len(hospitals)
        parts.add(service["environment"]["LDPEM_PART"])
    assert parts == {str(i) for i in range(1, len(hospitals) + 1)}


def test_warehouse_profile_reads_postgresql_without_a_password_on_the_command_line(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    profile = {name for name, service in services.items() if "profiles" in service}
    assert profile == {"warehouse-extract", "warehouse", "run-warehouse", "hospital-d"}
    assert all(services[name]["profiles"] == ["warehouse"] for name in profile)
    assert re.fullmatch(r"postgres:\d+@sha256:[0-9a-f]{64}", services["warehouse"]["image"])
    assert (
        "./deploy/warehouse/init.sql:/docker-entrypoint-initdb.d/init.sql:ro"
        in (services["warehouse"]["volumes"])
    )
    hospital = services["hospital-d"]
    command = hospital["command"]
    option = dict(zip(command[1::2], command[2::2], strict=True))
    assert command[0] == "client" and option["--data"].startswith("postgresql://ldpem_reader@")
    assert ":" not in option["--data"].split("//", 1)[1].split("@", 1)[0]  # no inline password
    assert "PGPASSWORD" in hospital["environment"] and "--password" not in command
    assert "ORDER BY p.person_id" in option["--query"]
    run = RunCreate.model_validate_json((ROOT / "deploy" / "run-warehouse.json").read_text())
    assert [h.name for h in run.hospitals] == ["hospital-d"]
    assert run.hospitals[0].token == hospital["environment"]["LDPEM_TOKEN"]
    assert run.d == len(option["--columns"].split(","))
    assert hospital["depends_on"]["warehouse"]["condition"] == "service_healthy"
    extract = services["warehouse-extract"]["command"]
    assert extract[extract.index("--n") + 1] == str(run.hospitals[0].records)
    assert extract[extract.index("--model") + 1] == run.model
