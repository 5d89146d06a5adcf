"""What binds a run to this agent's ledger: canonical JSON, the records' digest, and the first
difference between what was bound and what the coordinator says now."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import numpy as np

from ldpem.client.ledger import Binding, Ledger
from ldpem.client.trust import AgentError
from ldpem.common.core.accounting import Budget
from ldpem.common.mechanisms import Mechanism
from ldpem.common.models import Records
from ldpem.common.wire import Identity, RoundInfo

log = logging.getLogger("ldpem.client")

__all__ = [
    "beta_digest",
    "bind_run",
    "canonical",
    "check_binding",
    "check_round",
    "first_difference",
    "records_digest",
    "run_binding",
]


def beta_digest(values: list[float]) -> str:
    """SHA-256 of a round's β as the coordinator sent it (its JSON)."""
    return hashlib.sha256(json.dumps(values).encode()).hexdigest()


def records_digest(records: Records) -> str:
    """SHA-256 of the records' values in order. Not a budget key (the budget belongs to the
    state directory's dataset): it binds a run to its records, and warns of a change."""
    h = hashlib.sha256()
    x = np.ascontiguousarray(records.x, dtype=np.float64)
    h.update(repr(x.shape).encode())
    h.update(x.tobytes())
    if records.y is not None:
        h.update(np.ascontiguousarray(records.y, dtype=np.float64).tobytes())
    return h.hexdigest()


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _per_round(values: list[float]) -> float | list[float]:
    # One value when every round has it (equal rounds: the binding of a run without a
    # schedule is byte for byte what it was), else the list, t = 0 … T−1.
    return values[0] if len(set(values)) == 1 else values


def run_binding(
    me: Identity,
    *,
    mechanisms: list[tuple[Mechanism, float]],
    budget: Budget,
    allow_weaker: bool,
    dataset: str,
) -> str:
    """What an agent binds a run to in its ledger, as canonical JSON: the hospital, its
    records, the run's public parameters (schedule included) and the agent's own values
    derived from them: its ``budget``, each round's σ_r and μ (``mechanisms``: T of them)."""
    return canonical(
        {
            "hospital": me.hospital,
            "records": me.records,
            "params": me.params.model_dump(mode="json"),
            "agent": {
                "epsilon": budget.epsilon,
                "delta": budget.delta,
                "accounting": budget.accounting,
                "noise_std": _per_round([m.noise_std for m, _ in mechanisms]),
                "mu": _per_round([mu for _, mu in mechanisms]),
                "allow_weaker": allow_weaker,
                "dataset": dataset,
            },
        }
    )


def first_difference(bound: Any, now: Any, path: str = "") -> str:
    """``path.key was X, now Y`` for the first differing key; the coordinator's parameters
    are compared before the agent's values derived from them."""
    if isinstance(bound, dict) and isinstance(now, dict):
        keys = sorted(set(bound) | set(now), key=lambda key: (key != "params", key))
        for key in keys:
            if bound.get(key) != now.get(key):
                return first_difference(bound.get(key), now.get(key), f"{path}{key}.")
    return f"{path.rstrip('.')} was {bound!r}, now {now!r}"


def check_binding(run_id: str, bound: Binding, binding: str) -> None:
    """Refuse a restart whose binding differs from the one stored at the first contact."""
    if not bound.binding:
        raise AgentError(
            f"run {run_id} was started by an older agent that did not record its "
            "parameters; it cannot be resumed safely (nothing was sent)"
        )
    if bound.binding != binding:
        difference = first_difference(json.loads(bound.binding), json.loads(binding))
        raise AgentError(
            f"run {run_id} changed since this agent first took part: {difference}; refusing "
            "before sending anything (a changed parameter could make a record report twice "
            "or change its noise)"
        )


def check_round(me: Identity, info: RoundInfo, canonical_params: str) -> None:
    """Refuse a round answer for another run, with changed parameters, or out of [0, T)."""
    if info.run_id != me.run_id:
        raise AgentError(
            f"the coordinator answered for run {info.run_id[:80]!r}, not {me.run_id!r}; refusing"
        )
    now = canonical(info.params.model_dump(mode="json"))
    if now != canonical_params:
        difference = first_difference(json.loads(canonical_params), json.loads(now))
        raise AgentError(
            f"run {me.run_id} changed its parameters during the run: {difference}; refusing"
        )
    if info.status == "running" and not 0 <= info.round < me.params.rounds:
        raise AgentError(
            f"the coordinator opened round {info.round} of a run of "
            f"{me.params.rounds} rounds (0..{me.params.rounds - 1}); refusing"
        )


def bind_run(
    ledger: Ledger,
    run_id: str,
    binding: str,
    data_key: str,
    dataset: str,
    data: object,
    seed: int | None,
) -> Binding:
    """The run's binding in ``ledger``: stored at the first contact, checked at every
    restart (``data`` names the records in messages; ``seed`` is the research seed)."""
    bound = ledger.binding(run_id)
    if bound is not None:
        check_binding(run_id, bound, binding)
    else:
        last = ledger.last_records(dataset)
        if last is not None and last != data_key:
            log.warning(
                "%s: records changed since the last run; charged against the same budget "
                "(dataset %r)",
                data,
                dataset,
            )
        chosen = seed if seed is not None else ledger.seed()
        bound = ledger.bind_run(
            run_id, Binding(seed=chosen, records=data_key, dataset=dataset, binding=binding)
        )
        ledger.remember_records(dataset, data_key)
    if bound.records != data_key:
        raise AgentError(
            f"{data}: run {run_id} was started with other records; a record "
            "reported under one partition could report again under another"
        )
    if seed is not None and seed != bound.seed:
        raise AgentError(
            f"run {run_id} was started with --seed {bound.seed}, not {seed}; "
            "a different seed would partition the records differently"
        )
    return bound
