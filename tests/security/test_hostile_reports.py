"""Hostile and careless bodies, paths and queries against a real coordinator process.

With valid tokens (a hospital's for reports, the admin's for run creation), every request
of the classes below must get a 4xx whose ``detail`` is one line that echoes no token and
no non-finite value; none may get a 5xx (FastAPI's default validation handler used to
answer NaN/Infinity in a non-float field with a 500, the input being unencodable). After
them the run and the list of runs are unchanged and a valid report is still accepted.

Classes: non-finite literals (NaN, ±Infinity) in every field; huge numbers (±1e999,
10⁴⁰⁰ and 10⁵⁰⁰⁰ as integers); tiny ones (a σ_r of 1e-300, 5e-324, -0.0); wrong types
(true, false, null, "1", [], {}); fractions for ints; duplicate keys; missing and unknown
fields; non-objects; deep nesting; invalid UTF-8 and other encodings; malformed number
syntax; seeded random byte mutations of a valid body; hostile run ids, rounds and query
parameters in the URL.

Then the noise floor: a report declaring less noise than the run's budget needs is
refused, and accepted in a run created with ``allow_weaker_reports``, whose status (JSON
and HTML) shows that hospital's declared σ_r and the ε it implies.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from ldpem.common.wire import PublicParameters, ReportIn, RunCreate, expected_round_count
from ldpem.processes import Processes
from ldpem.server.coordinator import implied_epsilon, noise_floor
from tests.fedkit import ADMIN, TOKENS, report_body, run_request
from tests.reliability.kit import Cluster

COUNTS = [100, 101, 102]
ROUNDS = 3
D = 4
PLACEHOLDER = '"@@PLACEHOLDER@@"'

NON_FINITE = ["NaN", "Infinity", "-Infinity"]
HUGE = ["1e999", "-1e999", "1" + "0" * 400, "-1" + "0" * 400, "1" + "0" * 5000]
WRONG_TYPE = ["true", "false", "null", '"1"', '"1.5"', "[]", "{}", '"NaN"']
#: Classes whose detail may rightly quote "NaN": a run id in the URL, a string field.
QUOTES_INPUT = {"url", "string"}
NUMBER_SYNTAX = ["01", "+1", ".5", "1.", "0x10", "1e", "--1", "inf", "nan"]
TINY = ["1e-300", "5e-324", "1e-320", "-0.0", "0", "-1e-300"]
NON_FINITE_WORD = re.compile(r"\b(nan|-?inf|-?infinity)\b", re.IGNORECASE)


def substituted(valid: dict[str, Any], path: tuple[Any, ...], literal: str) -> bytes:
    """``valid`` as JSON with the value at ``path`` replaced by the raw ``literal``."""
    body = json.loads(json.dumps(valid))
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = PLACEHOLDER
    return json.dumps(body).replace(json.dumps(PLACEHOLDER), literal).encode()


def without(valid: dict[str, Any], field: str) -> bytes:
    return json.dumps({k: v for k, v in valid.items() if k != field}).encode()


def duplicated(valid: dict[str, Any], field: str, literal: str) -> bytes:
    text = json.dumps(valid)
    return (text[:-1] + f", {json.dumps(field)}: {literal}}}").encode()


def mutations(valid: bytes, count: int, *, rng: random.Random, schema: Any) -> list[bytes]:
    """``count`` random byte mutations of ``valid`` that the schema does not accept (a
    mutation that happens to be a valid body is not hostile; it is skipped)."""
    out: list[bytes] = []
    while len(out) < count:
        data = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            where = rng.randrange(len(data))
            action = rng.randrange(3)
            if action == 0:
                data[where] = rng.randrange(256)
            elif action == 1:
                data.insert(where, rng.randrange(256))
            elif len(data) > 1:
                del data[where]
        try:
            schema.model_validate_json(bytes(data))
        except ValidationError:
            out.append(bytes(data))
    return out


def structural(valid: dict[str, Any], fields: list[str]) -> list[tuple[str, bytes]]:
    text = json.dumps(valid)
    out: list[tuple[str, bytes]] = []
    for field in fields:
        out.append(("duplicate key", duplicated(valid, field, json.dumps(valid[field]))))
        out.append(("missing field", without(valid, field)))
    out.append(("unknown field", (text[:-1] + ', "extra": 1}').encode()))
    out.append(("unknown field", (text[:-1] + ', "__proto__": {}}').encode()))
    for top in ["[]", '"x"', "1", "null", "true", "", "{}", f"[{text}]", "{,}", text + text]:
        out.append(("not an object", top.encode()))
    out.append(("deep nesting", b"[" * 100_000 + b"]" * 100_000))
    out.append(("deep nesting", b'{"a":' * 50_000 + b"1" + b"}" * 50_000))
    out.append(("deep nesting", substituted(valid, (fields[0],), "[" * 500 + "1" + "]" * 500)))
    out.append(("invalid UTF-8", text.replace('"', '"\xff', 1).encode("latin-1")))
    out.append(("invalid UTF-8", text.encode() + b"\xc3\x28"))
    out.append(("invalid UTF-8", text.encode()[:-1] + b"\xc0\xaf}"))
    out.append(("invalid UTF-8", text.encode()[:-1] + b' , "\xe2\x82"}'))
    out.append(("other encoding", text.encode("utf-16")))
    out.append(("other encoding", b"\xef\xbb\xbf" + text.encode()))
    out.append(("control bytes", text.encode()[:-1] + b"\x00}"))
    out.append(("control bytes", substituted(valid, (fields[0],), '"h0\\u0000\\n"')))
    out.append(("lone surrogate", substituted(valid, (fields[0],), '"\\ud800"')))
    return out


#: The kinds of bad value put in each field, with their JSON literals.
BAD_VALUES = (("non-finite", NON_FINITE), ("huge number", HUGE), ("wrong type", WRONG_TYPE))


def report_bodies(valid: dict[str, Any], rng: random.Random) -> list[tuple[str, bytes]]:
    fields = list(valid)
    paths: list[tuple[Any, ...]] = [(f,) for f in fields] + [("total", 0)]
    out: list[tuple[str, bytes]] = []
    for path in paths:
        for kind, literals in BAD_VALUES:
            for literal in literals:
                shown = "string" if path == ("hospital",) and literal.startswith('"') else kind
                out.append((shown, substituted(valid, path, literal)))
    for literal in NUMBER_SYNTAX:
        out.append(("number syntax", substituted(valid, ("noise_std",), literal)))
    for literal in TINY:  # a σ_r this small made ε overflow: a 500 before
        out.append(("tiny number", substituted(valid, ("noise_std",), literal)))
    for path, literal in ((("round",), "0.0"), (("count",), f"{valid['count']}.0")):
        out.append(("fraction for an int", substituted(valid, path, literal)))
    out.append(("fraction for an int", substituted(valid, ("count",), f"{valid['count']}.5")))
    for field in fields:  # the same key twice with a different value
        out.append(("duplicate key", duplicated(valid, field, '"other"')))
    out += structural(valid, fields)
    raw = json.dumps(valid).encode()
    out += [("byte mutation", m) for m in mutations(raw, 60, rng=rng, schema=ReportIn)]
    return out


def run_bodies(valid: dict[str, Any], rng: random.Random) -> list[tuple[str, bytes]]:
    """Hostile variants of the valid run request ``valid``; none of them is a valid request
    (a null where null is the default, a bool in a bool field, a string as a name are left
    out)."""
    optional = {"seed", "quorum", "beta0", "tau", "delta", "beta_bound", "scale"}
    required = ["model", "d", "sigma", "rounds", "hospitals"]
    out: list[tuple[str, bytes]] = []
    paths: list[tuple[Any, ...]] = [(f,) for f in valid]
    paths += [("hospitals", 0, "records"), ("hospitals", 0, "name"), ("beta0", 0)]
    for path in paths:
        for kind, literals in BAD_VALUES:
            for literal in literals:
                if literal == "null" and path[0] in optional and len(path) == 1:
                    continue  # null is the default there: a valid request
                if literal.startswith('"') and path[-1] == "name":
                    continue  # "1", "1.5", "NaN" are valid hospital names
                if literal in ("true", "false") and isinstance(valid.get(path[0]), bool):
                    continue
                out.append((kind, substituted(valid, path, literal)))
    for path in (("d",), ("rounds",), ("hospitals", 0, "records")):
        out.append(("fraction for an int", substituted(valid, path, "2.5")))
    out += [(k, b) for k, b in structural(valid, list(valid)) if k != "missing field"]
    out += [("missing field", without(valid, field)) for field in required]
    raw = json.dumps(valid).encode()
    out += [("byte mutation", m) for m in mutations(raw, 40, rng=rng, schema=RunCreate)]
    return out


class Client:
    """Sends requests and checks each refusal: 4xx, a one-line detail, no token."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=60)
        self.classes: Counter[str] = Counter()
        self.statuses: Counter[int] = Counter()
        self.problems: list[str] = []

    def refused(
        self, kind: str, method: str, path: str, token: str | None, body: bytes | None = None
    ) -> None:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        response = self.http.request(method, path, content=body, headers=headers)
        self.classes[kind] += 1
        self.statuses[response.status_code] += 1
        where = f"{kind}: {method} {path[:80]} {(body or b'')[:80]!r}"
        if not 400 <= response.status_code < 500:
            self.problems.append(f"{where} -> {response.status_code} {response.text[:300]}")
            return
        try:
            detail = response.json()["detail"]
        except (ValueError, KeyError, TypeError):
            self.problems.append(f"{where} -> no JSON detail: {response.text[:300]}")
            return
        if not isinstance(detail, str) or "\n" in detail or len(detail) > 400:
            self.problems.append(f"{where} -> detail not one line: {detail!r:.300}")
        elif any(secret in response.text for secret in (ADMIN, *TOKENS)):
            self.problems.append(f"{where} -> a token in the answer")
        elif kind not in QUOTES_INPUT and NON_FINITE_WORD.search(detail):
            self.problems.append(f"{where} -> a non-finite value echoed: {detail}")


def snapshot(http: httpx.Client, run_id: str) -> list[Any]:
    return [http.get("/v1/runs").json()] + [
        http.get(f"/v1/runs/{run_id}{s}").json()
        for s in ("", "/rounds", "/participation", "/trajectory")
    ]


def enrolment(tokens: list[str]) -> list[dict[str, Any]]:
    return [{"name": f"h{i}", "records": c, "token": tokens[i]} for i, c in enumerate(COUNTS)]


def test_hostile_bodies_paths_and_queries_get_one_line_4xx_and_change_nothing(
    procs: Processes, tmp_path: Path
) -> None:
    cluster = Cluster(procs, tmp_path)
    cluster.start_coordinator()
    request = run_request(d=D, rounds=ROUNDS, round_deadline=3600, quorum=3, epsilon=1.0)
    request["hospitals"] = enrolment(TOKENS)
    created = cluster.create(request)
    run_id = created["run_id"]
    params = PublicParameters.model_validate(created["params"])
    count = expected_round_count(COUNTS[0], ROUNDS, 0)
    floor = noise_floor("local", params, count)
    valid = report_body(0, records=COUNTS[0], rounds=ROUNDS, noise_std=1.5 * floor)
    rng = random.Random(20261126)
    client = Client(cluster.url)
    before = snapshot(client.http, run_id)

    reports = report_bodies(valid, rng)
    for kind, body in reports:
        client.refused(kind, "POST", f"/v1/runs/{run_id}/rounds/0/reports", TOKENS[0], body)
    new_run = run_request(d=D, rounds=ROUNDS, beta0=[0.0] * D, quorum=2, epsilon=2.0)
    new_run |= {"eta": 0.5, "round_deadline": 60.0, "allow_weaker_reports": False}
    new_run["hospitals"] = [{"name": "x0", "records": 50}, {"name": "x1", "records": 60}]
    runs = run_bodies(new_run, rng)
    for kind, body in runs:
        client.refused(kind, "POST", "/v1/runs", ADMIN, body)

    # The URL: hostile run ids on every route that takes one, rounds and query values.
    run_ids = ["%00", "%FF", "%0A%0D", "x" * 5000, "..%2F..", "%F0%9F%98%80", "NaN", "%C3%28"]
    urls = 0
    for bad in run_ids:
        for suffix in ("", "/rounds", "/trajectory", "/participation", "/round"):
            client.refused("url", "GET", f"/v1/runs/{bad}{suffix}", TOKENS[0])
            urls += 1
        client.refused("url", "GET", f"/runs/{bad}", None)
        body = json.dumps(valid).encode()
        client.refused("url", "POST", f"/v1/runs/{bad}/rounds/0/reports", TOKENS[0], body)
        urls += 2
    for t in ["NaN", "Infinity", "1e999", "1" + "0" * 400, "-1", "1.5", "true", "0x0", "%00"]:
        body = json.dumps(valid).encode()
        client.refused("url", "POST", f"/v1/runs/{run_id}/rounds/{t}/reports", TOKENS[0], body)
        urls += 1
    queries = [f"after={v}" for v in ("NaN", "1e999", "1" + "0" * 400, "1.5", "true", "-2")]
    queries += [f"wait={v}" for v in ("nan", "inf", "-inf", "1e999", "-1", "x")]
    for query in queries:
        client.refused("url", "GET", f"/v1/runs/{run_id}/round?{query}", TOKENS[0])
        urls += 1

    assert not client.problems, "\n".join(client.problems[:20])
    assert len(reports) >= 150 and len(runs) >= 150 and urls >= 50
    assert snapshot(client.http, run_id) == before
    log = procs.log(cluster.server) if cluster.server is not None else ""
    assert "Traceback" not in log and "Exception" not in log, log[-3000:]

    # Still serving: the valid report is accepted.
    accepted = client.http.post(
        f"/v1/runs/{run_id}/rounds/0/reports",
        json=valid,
        headers={"Authorization": f"Bearer {TOKENS[0]}"},
    )
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["duplicate"] is False
    print(
        f"hostile: {len(reports)} report bodies, {len(runs)} run bodies, {urls} URLs; "
        f"classes {dict(sorted(client.classes.items()))}; "
        f"statuses {dict(sorted(client.statuses.items()))}"
    )
    client.http.close()


def test_a_report_weaker_than_the_run_is_refused_unless_the_run_allows_it(
    procs: Processes, tmp_path: Path
) -> None:
    cluster = Cluster(procs, tmp_path)
    cluster.start_coordinator()
    strict = run_request(d=D, rounds=ROUNDS, round_deadline=3600)
    strict["hospitals"] = enrolment(TOKENS)
    strict_run = cluster.create(strict)
    params = PublicParameters.model_validate(strict_run["params"])
    count = expected_round_count(COUNTS[0], ROUNDS, 0)
    floor = noise_floor("local", params, count)
    # The fuzz run's finding: σ_r = 1 where the run's is larger.
    weak = report_body(0, records=COUNTS[0], rounds=ROUNDS, noise_std=1.0)
    assert floor > 2.0
    http = httpx.Client(base_url=cluster.url, timeout=60)
    headers = {"Authorization": f"Bearer {TOKENS[0]}"}
    strict_path = f"/v1/runs/{strict_run['run_id']}/rounds/0/reports"
    before = snapshot(http, strict_run["run_id"])
    refused = http.post(strict_path, json=weak, headers=headers)
    assert refused.status_code == 422, refused.text
    assert "below the σ_r" in refused.json()["detail"]
    assert "allow_weaker_reports" in refused.json()["detail"]
    # Just below the floor (beyond the float tolerance) is refused; at the floor accepted.
    just_below = http.post(strict_path, json=weak | {"noise_std": floor * 0.9999}, headers=headers)
    assert just_below.status_code == 422, just_below.text
    # Strict types: true, "1" and 1e999 are not numbers.
    for literal in ("true", '"1"', "1e999"):
        raw = substituted(weak | {"noise_std": floor}, ("noise_std",), literal)
        response = http.post(
            strict_path, content=raw, headers=headers | {"Content-Type": "application/json"}
        )
        assert response.status_code == 422, response.text
        assert response.json()["detail"].startswith("noise_std: "), response.text
    assert snapshot(http, strict_run["run_id"]) == before
    at_floor = http.post(strict_path, json=weak | {"noise_std": floor}, headers=headers)
    assert at_floor.status_code == 200, at_floor.text

    # The same weak report in a run that allows weaker reports: accepted and shown.
    lenient = run_request(d=D, rounds=ROUNDS, round_deadline=3600, allow_weaker_reports=True)
    lenient["hospitals"] = enrolment([f"lenient-token-{i}-0123456789abcdef" for i in range(3)])
    lenient_run = cluster.create(lenient)
    lenient_id = lenient_run["run_id"]
    lenient_params = PublicParameters.model_validate(lenient_run["params"])
    accepted = http.post(
        f"/v1/runs/{lenient_id}/rounds/0/reports",
        json=weak,
        headers={"Authorization": "Bearer lenient-token-0-0123456789abcdef"},
    )
    assert accepted.status_code == 200, accepted.text
    summary = http.get(f"/v1/runs/{lenient_id}").json()
    assert summary["allow_weaker_reports"] is True
    assert http.get(f"/v1/runs/{strict_run['run_id']}").json()["allow_weaker_reports"] is False
    rows = {p["hospital"]: p for p in http.get(f"/v1/runs/{lenient_id}/participation").json()}
    epsilon = implied_epsilon("local", lenient_params, 1.0, count)
    assert epsilon is not None and epsilon > 2 * lenient_params.epsilon
    assert rows["h0"]["noise_std"] == 1.0
    assert rows["h0"]["epsilon"] == epsilon
    assert rows["h0"]["weaker"] is True
    assert rows["h1"]["noise_std"] is None and rows["h1"]["weaker"] is False
    strict_rows = http.get(f"/v1/runs/{strict_run['run_id']}/participation").json()
    assert strict_rows[0]["weaker"] is False
    assert strict_rows[0]["epsilon"] is not None
    assert abs(strict_rows[0]["epsilon"] - params.epsilon) < 1e-6
    page = http.get(f"/runs/{lenient_id}").text
    assert "weaker than the run&#x27;s budget" in page or "weaker than the run's budget" in page
    assert f"{epsilon:.4g}" in page and "declared σ_r" in page
    assert "allow_weaker_reports" in page
    # A different mechanism is refused even where weaker reports are allowed.
    other = http.post(
        f"/v1/runs/{lenient_id}/rounds/0/reports",
        json=weak
        | {"hospital": "h1", "count": expected_round_count(COUNTS[1], ROUNDS, 0)}
        | {"mechanism": "none", "noise_std": 0.0},
        headers={"Authorization": "Bearer lenient-token-1-0123456789abcdef"},
    )
    assert other.status_code == 422 and "mechanism none" in other.json()["detail"], other.text
    http.close()
