"""Random streams: where each draw of a run comes from.

An agent partitions its records with ``partition_rng(seed, run)`` and draws round t's noise
from ``noise_rng(seed, run, t)`` (a fresh OS seed unless a research ``--seed`` is given);
the coordinator draws round t's central noise from ``central_rng(run seed, t)``
(``FederatedStreams``). The simulator's default (``SharedStream``) is one generator for
everything.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = [
    "FederatedStreams",
    "SharedStream",
    "Streams",
    "central_rng",
    "noise_rng",
    "partition_rng",
    "run_digest",
]

#: Generator key of a run's central noise (with the run's seed and the round).
_CENTRAL_KEY = 0xCE


def run_digest(run_id: str) -> int:
    """The full SHA-256 of a run id as an integer (256 bits)."""
    return int(hashlib.sha256(run_id.encode()).hexdigest(), 16)


def partition_rng(seed: int, run_id: str) -> np.random.Generator:
    """The generator of a run's partition: the agent's partition seed and the run id."""
    return np.random.default_rng([seed, run_digest(run_id)])


def noise_rng(seed: int | None, run_id: str, t: int) -> np.random.Generator:
    """The generator of one report's noise: a fresh 256-bit seed from the operating system,
    never derived from stored state, the run or the round; with a research ``seed``, the
    reproducible stream of (seed, run, round), which voids the privacy guarantee."""
    if seed is None:
        return np.random.default_rng(int.from_bytes(os.urandom(32), "big"))
    return np.random.default_rng([seed, run_digest(run_id), t])


def central_rng(run_seed: int, t: int) -> np.random.Generator:
    """The generator of the coordinator's central noise in round ``t`` of a run."""
    return np.random.default_rng([run_seed, _CENTRAL_KEY, t])


class Streams(Protocol):
    """Where each random draw of a run comes from."""

    def partition(self, holder: int) -> np.random.Generator: ...

    def noise(self, holder: int, t: int) -> np.random.Generator: ...

    def central(self, t: int) -> np.random.Generator: ...


@dataclass(frozen=True)
class SharedStream:
    """One generator for every draw, in the order: partitions, then per round the holders'
    noise and the central noise (the simulator's default)."""

    rng: np.random.Generator

    def partition(self, holder: int) -> np.random.Generator:
        return self.rng

    def noise(self, holder: int, t: int) -> np.random.Generator:
        return self.rng

    def central(self, t: int) -> np.random.Generator:
        return self.rng


@dataclass(frozen=True)
class FederatedStreams:
    """The draws of a federated run ``run_id`` whose agents were started with the research
    ``seeds`` (one per holder, in holder order) and whose coordinator has ``run_seed``."""

    run_id: str
    seeds: Sequence[int]
    run_seed: int = 0

    def partition(self, holder: int) -> np.random.Generator:
        return partition_rng(self.seeds[holder], self.run_id)

    def noise(self, holder: int, t: int) -> np.random.Generator:
        return noise_rng(self.seeds[holder], self.run_id, t)

    def central(self, t: int) -> np.random.Generator:
        return central_rng(self.run_seed, t)
