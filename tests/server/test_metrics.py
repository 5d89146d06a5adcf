"""``GET /metrics``: Prometheus text that prometheus-client's own parser reads, and counts
that match the run that produced them."""

from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.parser import text_string_to_metric_families

from ldpem import __version__
from ldpem.client.trust import agent_mechanism
from ldpem.common.protocol import public_budget
from ldpem.server.app import create_app
from ldpem.server.metrics import REFUSAL_REASONS, Metrics
from tests.fedkit import hospital_headers, live_server, settings
from tests.secaggdriver import NAMES, InProcessCoordinator, create_run
from tests.server.opkit import READ, read_headers, run_gauges, scrape, start_run

ROUNDS = 4
HOSPITALS = 3


def refused(samples: dict[Any, float], reason: str) -> float:
    return samples[("ldpem_reports_refused_total", (("reason", reason),))]


def test_counters_match_a_demo_like_run(tmp_path: Path) -> None:
    app = create_app(settings(tmp_path, public_status=False, read_token=READ, max_body=4096))
    with TestClient(app) as client:
        study = start_run(client, hospitals=HOSPITALS, records=400, rounds=ROUNDS)
        before = scrape(client)
        assert before[("ldpem_reports_accepted_total", ())] == 0
        assert before[("ldpem_runs", (("status", "running"),))] == 1
        for reason in REFUSAL_REASONS:  # every reason is there from the start, at 0
            assert refused(before, reason) == 0

        first = study.report(0, 0)
        again = study.report(0, 0)  # the same report: an idempotent duplicate
        assert first.status_code == again.status_code == 200 and again.json()["duplicate"]
        base = f"/v1/runs/{study.run_id}/rounds"
        good: dict[str, Any] = {
            "hospital": "h1",
            "round": 0,
            "mechanism": "local",
            "count": 400 // ROUNDS,
            "total": [0.0] * 4,
            "noise_std": agent_mechanism(
                study.params,
                budget=public_budget(study.params),
            )[0].noise_std,
        }
        refusals = [
            ({}, hospital_headers(1), "unauthenticated"),
            ({**good, "count": 3}, hospital_headers(1), "invalid"),
            ({**good, "total": [1e12, 0, 0, 0]}, hospital_headers(1), "out_of_range"),
            ({"hospital": "h1"}, hospital_headers(1), "invalid"),  # not a report
            (good, hospital_headers(0), "wrong_hospital"),
            ({**good, "round": 3}, hospital_headers(1), "round_not_open"),
            ({**good, "total": [0.0] * 2000}, hospital_headers(1), "too_large"),
        ]
        for body, headers, reason in refusals:
            target = f"{base}/{body.get('round', 0)}/reports"
            if reason == "unauthenticated":
                headers = {}
                body = good
            response = client.post(target, json=body, headers=headers)
            assert response.status_code >= 400, (reason, response.text)
        study.round(0, [1, 2])
        for t in range(1, ROUNDS):
            study.round(t, range(HOSPITALS))
        # A second, different report for a closed round.
        conflict = client.post(
            f"{base}/0/reports", json={**good, "hospital": "h0"}, headers=hospital_headers(0)
        )
        assert conflict.status_code == 409

        after = scrape(client)
        rounds = client.get(base, headers=read_headers()).json()
        assert after[("ldpem_reports_accepted_total", ())] == HOSPITALS * ROUNDS
        assert after[("ldpem_reports_duplicate_total", ())] == 1
        expected = {reason: 0.0 for reason in REFUSAL_REASONS}
        for _, _, reason in refusals:
            expected[reason] += 1
        expected["conflicting_report"] += 1
        assert {r: refused(after, r) for r in REFUSAL_REASONS} == expected
        assert after[("ldpem_runs", (("status", "finished"),))] == 1
        assert after[("ldpem_runs", (("status", "running"),))] == 0
        assert after[("ldpem_round_duration_seconds_count", ())] == ROUNDS
        durations = [r["closed_at"] - r["opened_at"] for r in rounds]
        assert abs(after[("ldpem_round_duration_seconds_sum", ())] - sum(durations)) < 1e-6
        inf = after[("ldpem_round_duration_seconds_bucket", (("le", "+Inf"),))]
        assert inf == ROUNDS
        # Posted one at a time, each accepted report is its own group commit of one.
        assert after[("ldpem_commit_batch_reports_sum", ())] == HOSPITALS * ROUNDS
        assert after[("ldpem_commit_batch_reports_count", ())] == HOSPITALS * ROUNDS
        commits = after[("ldpem_commit_seconds_count", ())]
        assert commits >= HOSPITALS * ROUNDS + 1  # + the run's creation
        assert after[("ldpem_commit_seconds_sum", ())] > 0
        assert after[("ldpem_long_polls_open", ())] == 0


def test_a_group_commit_is_one_observation_of_its_size(tmp_path: Path) -> None:
    # A window long enough that the three reports, posted together, share one commit.
    app = create_app(settings(tmp_path, commit_window=0.5))
    with live_server(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        study = start_run(client, hospitals=HOSPITALS, records=400, rounds=ROUNDS)
        threads = [threading.Thread(target=study.round, args=(0, [i])) for i in range(HOSPITALS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        samples = scrape(client)
    assert samples[("ldpem_reports_accepted_total", ())] == HOSPITALS
    assert samples[("ldpem_commit_batch_reports_sum", ())] == HOSPITALS
    assert samples[("ldpem_commit_batch_reports_count", ())] < HOSPITALS


def test_open_long_polls_are_counted_while_they_wait(tmp_path: Path) -> None:
    app = create_app(settings(tmp_path, max_wait=30))
    with live_server(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        study = start_run(client, hospitals=HOSPITALS, records=400, rounds=ROUNDS)
        answers: list[int] = []

        def poll(i: int) -> None:
            answer = httpx.get(
                f"{url}/v1/runs/{study.run_id}/round?after=0&wait=25",
                headers=hospital_headers(i),
                timeout=60,
            )
            answers.append(answer.json()["round"])

        pollers = [threading.Thread(target=poll, args=(i,)) for i in range(2)]
        for thread in pollers:
            thread.start()
        deadline = time.monotonic() + 20
        while scrape(client)[("ldpem_long_polls_open", ())] != 2:
            assert time.monotonic() < deadline, "the long-polls were not counted"
            time.sleep(0.05)
        study.round(0, range(HOSPITALS))  # round 1 opens: the waiters answer
        for thread in pollers:
            thread.join(30)
        assert answers == [1, 1]
        assert scrape(client)[("ldpem_long_polls_open", ())] == 0


def test_each_app_has_its_own_registry(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = create_app(settings(tmp_path / "one"))
    two = create_app(settings(tmp_path / "two"))
    with TestClient(one) as first, TestClient(two) as second:
        study = start_run(first, hospitals=HOSPITALS, records=400, rounds=ROUNDS)
        study.round(0, range(HOSPITALS))
        assert scrape(first)[("ldpem_reports_accepted_total", ())] == HOSPITALS
        assert scrape(second)[("ldpem_reports_accepted_total", ())] == 0
        assert scrape(second)[("ldpem_runs", (("status", "running"),))] == 0


def test_no_created_series_no_repeated_help_and_process_and_build_info(tmp_path: Path) -> None:
    app = create_app(settings(tmp_path))
    with TestClient(app) as client:
        study = start_run(client, hospitals=HOSPITALS, records=400, rounds=ROUNDS)
        study.round(0, range(HOSPITALS))  # counters and histograms with observations
        text = client.get("/metrics", headers=read_headers()).text
    helps = [line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")]
    assert helps and len(helps) == len(set(helps)), "a HELP line is repeated"
    assert "_created" not in text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    build = families["ldpem_build_info"]
    assert [(s.name, s.labels, s.value) for s in build.samples] == [
        ("ldpem_build_info", {"version": __version__}, 1.0)
    ]
    assert "python_info" in families
    if sys.platform.startswith("linux"):  # prometheus_client reads /proc
        for name in ("process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds"):
            assert families[name].samples[0].value > 0, name
        start = families["process_start_time_seconds"].samples[0].value
        assert 0 < time.time() - start < 24 * 3600


def test_created_series_are_left_out_without_a_global_switch() -> None:
    """The library's own registries still get their _created samples: the coordinator
    changes nothing for a program that embeds it."""
    ours = Metrics()  # what create_app builds
    ours.reports_accepted.inc()
    assert b"_created" not in generate_latest(ours.registry)
    assert prometheus_metrics._use_created is True
    registry = CollectorRegistry()
    Counter("embedding_program_events", "Events.", registry=registry).inc()
    assert b"embedding_program_events_created" in generate_latest(registry)


def test_run_health_gauges_follow_a_run_that_misses_a_hospital(tmp_path: Path) -> None:
    with TestClient(create_app(settings(tmp_path))) as client:
        study = start_run(client, hospitals=3, records=400, rounds=3, quorum=2, round_deadline=1.5)
        fresh = run_gauges(scrape(client), study.run_id)
        assert fresh["ldpem_run_open_round_age_seconds"] >= 0
        assert {k: v for k, v in fresh.items() if k != "ldpem_run_open_round_age_seconds"} == {
            "ldpem_run_rounds": 3,
            "ldpem_run_rounds_closed": 0,
            "ldpem_run_hospitals_late": 0,
            "ldpem_run_hospitals_missing": 0,
            "ldpem_run_degraded": 0,
        }
        study.round(0, [0, 1])  # h2 never reports in round 0: it closes at its deadline
        deadline = time.monotonic() + 20
        while client.get(f"/v1/runs/{study.run_id}").json()["round"] == 0:
            assert time.monotonic() < deadline, "round 0 did not close at its deadline"
            time.sleep(0.05)
        missing = run_gauges(scrape(client), study.run_id)
        assert missing["ldpem_run_rounds_closed"] == 1
        assert missing["ldpem_run_hospitals_missing"] == 1
        assert missing["ldpem_run_degraded"] == 1
        study.round(1, range(3))
        study.round(2, range(3))
        finished = run_gauges(scrape(client), study.run_id)
        assert finished == {
            "ldpem_run_rounds": 3,
            "ldpem_run_rounds_closed": 3,  # no open round: no age
            "ldpem_run_hospitals_late": 0,
            "ldpem_run_hospitals_missing": 1,
            "ldpem_run_degraded": 1,
        }
        assert run_gauges(scrape(client), study.run_id) == finished  # an ended run's are kept


def test_secagg_messages_are_counted_by_step_and_outcome(tmp_path: Path) -> None:
    """Issue 43, finding 6: ``ldpem_reports_*`` matched only ``…/reports``, so no secure
    aggregation message was counted and an alert on refusals could not fire for them."""
    coordinator = InProcessCoordinator(tmp_path)
    try:
        run = create_run(coordinator.client, "metrics")
        holders = run.holders(0)
        adverts = {n: h.advertise().to_dict() for n, h in holders.items()}
        statuses = [run.post(0, n, "advertise", adverts[n]) for n in NAMES[:2]]
        statuses.append(run.post(0, NAMES[0], "advertise", adverts[NAMES[0]]))  # retried
        statuses += [
            # Another holder's message under h2's token, and no token at all.
            run.post(0, NAMES[2], "advertise", adverts[NAMES[3]]),
            run.client.post(run.url(0, "advertise"), json=adverts[NAMES[2]]),
            # Round 1 is not open yet; a step the protocol does not have.
            run.post(1, NAMES[2], "advertise", adverts[NAMES[2]]),
            run.post(0, NAMES[2], "gossip", {}),
        ]
        seen = [r.status_code for r in statuses]
        samples = scrape(coordinator.client)
    finally:
        coordinator.close()
    assert seen == [200, 200, 200, 403, 401, 409, 422]

    def count(step: str, outcome: str) -> float:
        return samples[("ldpem_secagg_messages_total", (("outcome", outcome), ("step", step)))]

    assert count("advertise", "accepted") == 3
    assert count("advertise", "refused") == 2
    assert count("advertise", "out_of_step") == 1
    assert count("other", "refused") == 1
    # Every step's series exists from the start, at 0, for increase() to see a first one.
    assert count("unmask", "refused") == 0 and count("shares", "error") == 0
    # Secagg messages are not reports.
    assert samples[("ldpem_reports_accepted_total", ())] == 0
    assert refused(samples, "unauthenticated") == 0


FEDERATED = Path(__file__).resolve().parents[2] / "docs" / "FEDERATED.md"
#: ``name{label="value", label=~"regex"}`` in a PromQL expression (the selectors our rules use).
_SELECTOR = re.compile(r"\b(ldpem_[a-z_]+)(?:\{([^}]*)\})?")
_MATCHER = re.compile(r'(\w+)\s*(=~|=)\s*"([^"]*)"')


def documented_rules() -> list[dict[str, Any]]:
    """The alerting rules of docs/FEDERATED.md's ``groups:`` YAML block(s), parsed."""
    blocks = re.findall(r"```yaml\n(groups:.*?)```", FEDERATED.read_text(), flags=re.S)
    assert blocks, "no alerting rules in docs/FEDERATED.md"
    groups = [g for block in blocks for g in yaml.safe_load(block)["groups"]]
    return [rule for g in groups for rule in g["rules"]]


def selects(samples: dict[Any, float], name: str, matchers: str) -> bool:
    """Whether some exported sample is of ``name`` and matches every label matcher."""
    wanted = _MATCHER.findall(matchers)
    for sample_name, labels in samples:
        found = dict(labels)
        if sample_name == name and all(
            (re.fullmatch(value, found.get(label, "")) if op == "=~" else found.get(label) == value)
            for label, op, value in wanted
        ):
            return True
    return False


def test_the_documented_alerts_select_exported_series_secagg_refusals_included(
    tmp_path: Path,
) -> None:
    """Every selector of docs/FEDERATED.md's alerting rules names a series /metrics
    exports (of a running secagg run), and a rule fires on refused secagg messages
    (issue 43, finding 6: the refusal alert could not fire for secure aggregation)."""
    coordinator = InProcessCoordinator(tmp_path)
    try:
        create_run(coordinator.client, "alerts")
        samples = scrape(coordinator.client)
    finally:
        coordinator.close()
    rules = documented_rules()
    selectors = [m for rule in rules for m in _SELECTOR.findall(rule["expr"])]
    assert selectors
    missing = [f"{n}{{{m}}}" for n, m in selectors if not selects(samples, n, m)]
    assert missing == []
    on_secagg = [
        rule["alert"]
        for rule in rules
        if ("ldpem_secagg_messages_total", 'outcome="refused"') in _SELECTOR.findall(rule["expr"])
    ]
    assert len(on_secagg) == 1
