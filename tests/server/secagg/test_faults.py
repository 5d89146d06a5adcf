"""A holder's fault costs its run a round at most (issue 29, finding 2): whatever a holder
posts to the secagg routes is never answered 5xx, a round a wrong share spoils is settled
(completed or its run failed with the reason) and never left open, and a coordinator
restarted over one run's spoilt state starts, fails only that run and keeps the others
going. A real coordinator in-process on its state file (``TestClient``); the same with a
process and SIGKILL is tests/cli/test_secagg_restart.py."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from ldpem.common.secagg.runvalues import grid_of, run_shares_mechanism, signed_sum
from ldpem.common.secagg.steps import HOLDER_STEPS, Step
from ldpem.server.secagg.rounds import MAX_EXTENSIONS, UNATTRIBUTABLE_LIMIT, SecAggRounds
from tests.common.secagg.kit import dealing_wrong
from tests.fedkit import admin_headers
from tests.secaggdriver import (
    NAMES,
    D,
    DrivenRun,
    InProcessCoordinator,
    create_run,
    liar,
    play_round,
    spoil,
    stored_body,
)


def stored_kinds(tmp_path: Path, run_id: str) -> list[str]:
    with contextlib.closing(sqlite3.connect(tmp_path / "coordinator.sqlite")) as db:
        rows = db.execute(
            "SELECT kind FROM secagg_messages WHERE run_id = ? ORDER BY t, seq", (run_id,)
        ).fetchall()
    return [str(k) for (k,) in rows]


def true_total(run: DrivenRun, inputs: dict[str, list[int]]) -> list[float]:
    """The round's total the coordinator must find: the holders' inputs summed."""
    bits = run.params.modulus_bits
    assert bits is not None
    residues = [sum(inputs[n][j] for n in NAMES) for j in range(D)]
    return [grid_of(run_shares_mechanism(run.params)) * v for v in signed_sum(residues, bits)]


def completed_without_the_liar(
    tmp_path: Path, run: DrivenRun, inputs: dict[str, list[int]]
) -> None:
    """Round 0 closed with the true sum of every holder's input, and h1 named as the
    sender of a wrong share in the stored sum."""
    summary = run.summary()
    assert (summary["status"], summary["round"]) == ("running", 1), summary
    total = stored_body(tmp_path, run.run_id, 0, "sum")
    assert total["total"] == true_total(run, inputs)
    assert total["survivors"] == NAMES
    assert list(total["faulty"]) == ["h1"] and "'h0'" in total["faulty"]["h1"], total


def test_a_random_unmasking_share_is_named_and_the_round_completes_without_it(
    coordinator: InProcessCoordinator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Guards finding 2: on 8e54e94 the last unmasking response (the one that closed the
    step) was answered 500 and the round stayed open for ever, its step marked done. Now
    h1's wrong share is caught and named, and the t_min = 3 other responses give the sum."""
    run = create_run(coordinator.client, "a")
    inputs = run.inputs(1)
    played = play_round(run, 0, inputs, alter=liar("h1", "h0"))
    assert played.statuses == [200] * (len(HOLDER_STEPS) * len(NAMES))
    completed_without_the_liar(tmp_path, run, inputs)
    assert "hospital h1 is at fault" in caplog.text


def test_a_wrong_share_among_exactly_t_min_responses_fails_the_run_naming_its_sender(
    coordinator: InProcessCoordinator,
) -> None:
    """Guards the other side of finding 2: with h3 silent, h1's wrong share leaves two
    verified shares, fewer than t_min = 3. At the step's deadline (on_short "fail") the
    run fails with a one-line reason naming h1, instead of a 500 and an open round."""
    run = create_run(coordinator.client, "a", round_deadline=2.0, on_short="fail")
    played = play_round(run, 0, run.inputs(1), alter=liar("h1", "h0"), silent={"h3"})
    assert played.statuses == [200] * (len(HOLDER_STEPS) * len(NAMES) - 1)
    deadline = time.monotonic() + 30
    while run.summary()["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    summary = run.summary()
    assert summary["status"] == "failed", summary
    assert "wrong shares came from 'h1'" in summary["reason"], summary
    assert "\n" not in summary["reason"]
    # The run's holders are refused from now on, not answered 5xx.
    assert run.post(0, "h3", "unmask", played.sent["unmask"]["h3"].to_dict()).status_code == 409


def test_under_on_short_extend_a_late_holder_completes_a_round_a_wrong_share_held_up(
    coordinator: InProcessCoordinator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The run's on_short policy decides a fault at a deadline with a holder missing:
    "extend" waits for it (h1's wrong share left two verified shares; h3's late one makes
    three), and the round then completes without h1's share, naming it."""
    run = create_run(coordinator.client, "a", round_deadline=2.0, on_short="extend")
    inputs = run.inputs(1)
    played = play_round(run, 0, inputs, alter=liar("h1", "h0"), silent={"h3"})
    assert played.statuses == [200] * (len(HOLDER_STEPS) * len(NAMES) - 1)
    deadline = time.monotonic() + 30  # past the unmask step's deadline: extended, not failed
    while "wrong shares came from 'h1'; extended" not in caplog.text:
        assert time.monotonic() < deadline, caplog.text
        time.sleep(0.05)
    assert (run.summary()["status"], run.summary()["round"]) == ("running", 0)
    assert run.post(0, "h3", "unmask", played.sent["unmask"]["h3"].to_dict()).status_code == 200
    completed_without_the_liar(tmp_path, run, inputs)


def test_a_dealer_of_wrong_shares_costs_the_round_naming_it_and_the_run_goes_on(
    coordinator: InProcessCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dealer's wrong shares cannot be mended by a late answer: at the deadline, h3
    still missing, round 0 is lost naming h0 although on_short is "extend" (it would wait
    for ever otherwise), and the run goes on at round 1 with β unchanged (issue 41,
    finding 2: on ff9f02a the run failed)."""
    run = create_run(coordinator.client, "a", round_deadline=2.0, on_short="extend")
    beta0 = run.summary()["beta"]
    holders = run.holders(0)
    dealing_wrong(monkeypatch, holders["h0"], "b")
    played = play_round(run, 0, run.inputs(1), silent={"h3"}, holders=holders)
    assert played.statuses == [200] * (len(HOLDER_STEPS) * len(NAMES) - 1)
    deadline = time.monotonic() + 30
    while run.summary()["round"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    summary = run.summary()
    assert (summary["status"], summary["round"]) == ("running", 1), summary
    assert summary["beta"] == beta0
    lost = stored_body(coordinator.tmp_path, run.run_id, 0, "lost")
    assert lost["cause"] == "faulty" and lost["culprits"] == ["h0"], lost
    assert "'h0' dealt wrong shares" in lost["reason"]
    # The next round runs as any other, with every holder.
    played = play_round(run, 1, run.inputs(2))
    assert played.statuses == [200] * (len(HOLDER_STEPS) * len(NAMES))
    assert run.summary()["round"] == 2


def _out_of_range(run: DrivenRun, seed: int) -> dict[str, list[int]]:
    """h0's input 1,000 grid units below 2^(bits-1): the sum comes out far out of range."""
    bits = run.params.modulus_bits
    assert bits is not None
    inputs = run.inputs(seed)
    inputs["h0"] = [2 ** (bits - 1) - 1000] * D
    return inputs


def test_an_out_of_range_sum_costs_the_round_unattributed_and_repeated_pauses_the_run(
    coordinator: InProcessCoordinator, tmp_path: Path
) -> None:
    """The masks keep anyone from knowing whose input was out of range: the round is lost
    as unattributable (API, /metrics) and the run goes on; after the
    UNATTRIBUTABLE_LIMIT-th such round the run pauses, saying what the operator can do,
    its agents' long-poll is held (no spin), and `resume` lets it go on (issue 41,
    finding 2: on ff9f02a the first one failed the run)."""
    run = create_run(coordinator.client, "a", rounds=UNATTRIBUTABLE_LIMIT + 2)
    for t in range(UNATTRIBUTABLE_LIMIT):
        play_round(run, t, _out_of_range(run, t))
        summary = run.summary()
        lost = stored_body(tmp_path, run.run_id, t, "lost")
        assert lost["cause"] == "unattributable" and lost["culprits"] == [], lost
        assert summary["round"] == t + 1, summary
        if t + 1 < UNATTRIBUTABLE_LIMIT:
            assert summary["status"] == "running", summary
    assert summary["status"] == "paused", summary
    assert "ldpem run resume" in summary["reason"] and "\n" not in summary["reason"]
    rounds = coordinator.client.get(f"/v1/runs/{run.run_id}/rounds").json()
    views = [r["secagg"] for r in rounds if r["secagg"] is not None]
    assert views[0]["step"] == "lost" and views[0]["lost_round"]["cause"] == "unattributable"
    metrics = coordinator.client.get("/metrics").text
    assert f'ldpem_secagg_lost_rounds_total{{cause="unattributable"}} {UNATTRIBUTABLE_LIMIT}.0' in (
        metrics
    )
    assert 'ldpem_runs{status="paused"} 1.0' in metrics
    # Paused: secure-aggregation messages are refused, and an agent's long-poll is held
    # for its wait (it would otherwise spin), then answers "paused".
    advert = run.holders(UNATTRIBUTABLE_LIMIT)["h0"].advertise().to_dict()
    assert run.post(UNATTRIBUTABLE_LIMIT, "h0", "advertise", advert).status_code == 409
    token = run.tokens["h0"]
    began = time.monotonic()
    info = coordinator.client.get(
        f"/v1/runs/{run.run_id}/round",
        params={"after": UNATTRIBUTABLE_LIMIT - 1, "wait": 0.5},
        headers={"Authorization": f"Bearer {token}"},
    ).json()
    assert info["status"] == "paused" and time.monotonic() - began >= 0.45
    # The operator resumes: the open round runs as any other.
    assert coordinator.client.post(f"/v1/runs/{run.run_id}/resume").status_code == 401
    resumed = coordinator.client.post(f"/v1/runs/{run.run_id}/resume", headers=admin_headers())
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["status"] == "running"
    played = play_round(run, UNATTRIBUTABLE_LIMIT, run.inputs(9))
    assert played.statuses == [200] * (len(HOLDER_STEPS) * len(NAMES))
    assert run.summary()["round"] == UNATTRIBUTABLE_LIMIT + 1
    again = coordinator.client.post(f"/v1/runs/{run.run_id}/resume", headers=admin_headers())
    assert again.status_code == 409  # only a paused run resumes


def test_a_restart_over_a_spoilt_round_settles_it_and_the_other_run_goes_on(
    coordinator: InProcessCoordinator, tmp_path: Path
) -> None:
    """Guards finding 2's restart: the state 8e54e94 left behind (every unmasking response
    of a round stored, one of them wrong, no sum) made the coordinator fail at start-up
    with SecAggError, taking every other run down. Now the restart completes that round
    without the wrong share (three verified ones are t_min), and another run caught in
    the middle of its round goes on. The restart that must fail the run instead (fewer
    than t_min verified shares) is tests/cli/test_secagg_restart.py's, with a process."""
    spoilt, other = create_run(coordinator.client, "a"), create_run(coordinator.client, "b")
    played = play_round(spoilt, 0, spoilt.inputs(1), until=Step.SIGNATURE)
    begun = play_round(other, 0, other.inputs(2), until=Step.ADVERTISE)
    requests = {n: spoilt.get(0, n, "unmask-request").json() for n in NAMES}
    coordinator.close()
    spoil(tmp_path / "coordinator.sqlite", spoilt, 0, played, requests)
    coordinator.restart()
    spoilt.client = other.client = coordinator.client
    completed_without_the_liar(tmp_path, spoilt, spoilt.inputs(1))
    assert stored_kinds(tmp_path, spoilt.run_id).count("unmask") == len(NAMES)
    # The other run goes on: its advertisements were kept (the same ones again are
    # accepted), and the round closes with every holder.
    played = play_round(other, 0, other.inputs(2), holders=begun.holders)
    assert played.statuses == [200] * (len(HOLDER_STEPS) * len(NAMES))
    assert (other.summary()["status"], other.summary()["round"]) == ("running", 1)


def test_a_run_whose_stored_messages_do_not_replay_fails_alone(
    coordinator: InProcessCoordinator, tmp_path: Path
) -> None:
    """Guards ``recover``'s isolation: a stored message that no longer reads (here a
    corrupt row) fails its run with the reason at the restart; start-up and the other run
    are untouched (8e54e94 suppressed only Conflict: the error stopped start-up)."""
    broken, other = create_run(coordinator.client, "a"), create_run(coordinator.client, "b")
    play_round(broken, 0, broken.inputs(1), until=Step.ADVERTISE)
    begun = play_round(other, 0, other.inputs(2), until=Step.ADVERTISE)
    coordinator.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "coordinator.sqlite")) as db:
        db.execute(
            "UPDATE secagg_messages SET body = '{\"holder\": 1' WHERE run_id = ? AND seq = 0",
            (broken.run_id,),
        )
        db.commit()
    coordinator.restart()
    broken.client = other.client = coordinator.client
    summary = broken.summary()
    assert summary["status"] == "failed" and "do not replay" in summary["reason"], summary
    # Its holders are refused, not answered 5xx.
    assert broken.get(0, "h0", "participants", wait=0).status_code == 409
    played = play_round(other, 0, other.inputs(2), holders=begun.holders)
    assert played.statuses == [200] * (len(HOLDER_STEPS) * len(NAMES))
    assert (other.summary()["status"], other.summary()["round"]) == ("running", 1)


def test_an_unexpected_error_rebuilding_one_run_fails_that_run_alone(
    coordinator: InProcessCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards ``recover``'s last line of defence: whatever goes wrong rebuilding one run's
    round (here a RuntimeError, standing for a bug) fails that run with the reason, and
    start-up and the other run go on (8e54e94: start-up failed)."""
    broken, other = create_run(coordinator.client, "a"), create_run(coordinator.client, "b")
    play_round(broken, 0, broken.inputs(1), until=Step.ADVERTISE)
    begun = play_round(other, 0, other.inputs(2), until=Step.ADVERTISE)
    coordinator.close()
    replay = SecAggRounds._replay

    def failing(self: SecAggRounds, r: Any) -> None:
        if r.run_id == broken.run_id:
            raise RuntimeError("a bug")
        replay(self, r)

    monkeypatch.setattr(SecAggRounds, "_replay", failing)
    coordinator.restart()
    broken.client = other.client = coordinator.client
    summary = broken.summary()
    assert summary["status"] == "failed", summary
    assert "could not be rebuilt (RuntimeError('a bug'))" in summary["reason"], summary
    played = play_round(other, 0, other.inputs(2), holders=begun.holders)
    assert played.statuses == [200] * (len(HOLDER_STEPS) * len(NAMES))
    assert (other.summary()["status"], other.summary()["round"]) == ("running", 1)


#: Bodies no holder's agent sends: wrong types, missing and unknown fields, bad base64,
#: huge numbers, names off the roster.
GARBAGE: list[object] = [
    {},
    {"holder": 1},
    {"holder": "h0", "run_id": None, "round": "0"},
    {"holder": "h0", "run_id": "x" * 300, "round": 10**400},
    {"holder": "h0", "run_id": "r", "round": 0, "ciphertexts": {"h1": "!!"}},
    {"holder": "h0", "run_id": "r", "round": 0, "ciphertexts": {"../x": "AA=="}},
    {"holder": "h0", "run_id": "r", "round": 0, "values": "AAAA"},
    {"holder": "h0", "run_id": "r", "round": 0, "self_mask_shares": [], "key_shares": {}},
]


def mutations(body: dict[str, Any]) -> list[dict[str, Any]]:
    """``body`` with each field in turn replaced by a wrong value, and with an extra one."""
    out = []
    wrongs: tuple[object, ...] = (None, 1.5e308, -1, "", [], {}, "A" * 5000, 2**70)
    for field in body:
        for wrong in wrongs:
            out.append({**body, field: wrong})
    out.append({**body, "extra": 1})
    return out


def test_no_message_a_holder_can_post_is_answered_5xx(coordinator: InProcessCoordinator) -> None:
    """Guards the coordinator's rule (never a 5xx to a hostile body) on the secagg routes:
    garbage and mutated messages at every step of a live round, messages of another run,
    round or holder, replays after the round closed, messages for a failed run and an
    unknown run, and the fetches of each."""
    run = create_run(coordinator.client, "a")
    played = play_round(run, 0, run.inputs(1))
    codes: list[int] = []
    for t in (0, 1, 7):
        for step in HOLDER_STEPS:
            for body in GARBAGE + mutations(played.sent[step]["h0"].to_dict()):
                codes.append(run.post(t, "h0", step, body).status_code)
            # h0's message posted as h1 (a token of another holder), and replayed.
            codes.append(run.post(t, "h1", step, played.sent[step]["h0"].to_dict()).status_code)
            codes.append(run.post(t, "h0", step, played.sent[step]["h0"].to_dict()).status_code)
        for what in ("participants", "bundle", "consistency-check", "unmask-request"):
            codes.append(run.get(t, "h0", what, wait=0).status_code)
    # Round 1, live: garbage at each of its steps too.
    later = play_round(run, 1, run.inputs(2), alter=liar("h2", "h3"))
    codes += later.statuses
    for step in HOLDER_STEPS:
        for body in mutations(later.sent[step]["h3"].to_dict()):
            codes.append(run.post(1, "h3", step, body).status_code)
    # An unknown run, and another run's token.
    other = create_run(coordinator.client, "b")
    codes.append(other.client.post("/v1/runs/nope/rounds/0/secagg/advertise", json={}).status_code)
    codes.append(
        other.post(0, "h0", "advertise", played.sent["advertise"]["h0"].to_dict()).status_code
    )
    assert codes and all(code < 500 for code in codes), sorted(set(codes))
    assert set(codes) <= {200, 202, 401, 403, 404, 409, 422}, sorted(set(codes))
    # Round 1's liar was named and left out; the run finished.
    assert run.summary()["status"] == "finished"
    assert list(stored_body(coordinator.tmp_path, run.run_id, 1, "sum")["faulty"]) == ["h2"]


def test_a_retry_is_accepted_while_the_round_is_open_and_409_after(
    coordinator: InProcessCoordinator,
) -> None:
    """docs/SECAGG.md's claim, as it now reads (issue 41, finding 5: it said a retry is
    accepted "also after the step closed", and after the round closed it was a 409): an
    advertisement sent again once its step closed is accepted while the round is open; once
    the round closed, the same message is answered 409."""
    run = create_run(coordinator.client, "a")
    played = play_round(run, 0, run.inputs(1), until=Step.SHARES)
    advert = played.sent["advertise"]["h0"].to_dict()
    assert run.post(0, "h0", "advertise", advert).status_code == 200  # step closed, round open
    played = play_round(run, 0, run.inputs(1), holders=played.holders)
    assert run.summary()["round"] == 1
    assert run.post(0, "h0", "advertise", advert).status_code == 409


def test_a_step_short_of_a_holder_that_never_comes_back_is_extended_a_bounded_number_of_times(
    coordinator: InProcessCoordinator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 41, finding 3's general case: under "extend", a step after the advertise step
    that is short because a holder crashed (its round secrets are gone: it cannot come
    back) was extended for ever. Now after MAX_EXTENSIONS periods the round is lost,
    naming the proved culprit, and the run goes on."""
    run = create_run(coordinator.client, "a", round_deadline=1.0, on_short="extend")
    played = play_round(run, 0, run.inputs(1), alter=liar("h1", "h0"), silent={"h3"})
    assert played.statuses == [200] * (len(HOLDER_STEPS) * len(NAMES) - 1)
    deadline = time.monotonic() + 60
    while run.summary()["round"] == 0:
        assert time.monotonic() < deadline, caplog.text
        time.sleep(0.05)
    assert caplog.text.count("wrong shares came from 'h1'; extended") == MAX_EXTENSIONS
    lost = stored_body(tmp_path, run.run_id, 0, "lost")
    assert (lost["cause"], lost["culprits"]) == ("faulty", ["h1"]), lost
    assert f"still short after {MAX_EXTENSIONS} extensions of the unmask step" in lost["reason"]
    assert run.summary()["status"] == "running"
