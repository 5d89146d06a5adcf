"""The public neighbour graph of SecAgg+ (Bell, Bonawitz, Gascón, Lepoint, Raykova, CCS
2020), and the public random committee that certifies a round's survivor set.

Under SecAgg+ a holder masks with, and shares its seeds with, only its k neighbours in a
graph that every holder computes by itself from public values, so that the coordinator
cannot pick it (docs/SECAGG_GRAPH.md has the derivation of k and the thresholds,
``parameters.py`` computes them). Everything here is pure and deterministic:

* **The seed** (``graph_seed``) is SHA-256 over a domain tag, the run id, the round and
  the roster digest: values bound before the round starts, so the coordinator cannot choose
  the graph after seeing the round's keys. (A coordinator that creates G runs and keeps
  the one whose graph suits it gains at most a factor G in every failure probability:
  hence the 2⁻⁴⁰ target of ``graph_parameters``.)
* **The permutation** (``permutation``) of the holders is a Fisher–Yates shuffle driven by
  the ChaCha20 keystream under a key derived from the seed (the PRG of ``masks.py``:
  ``cryptography``, never the ``random`` module); each index is drawn exactly uniformly,
  by rejection of the 64-bit words above the largest multiple of the range.
* **The graph** (``NeighbourGraph``) is the Harary graph H(k, K) over that cycle: each
  holder is linked to the k/2 holders on each side of it in the permuted order. It is
  symmetric and k-regular (k even, k ≤ K − 2), and for one holder its neighbourhood is a
  uniformly random k-subset of the other K − 1 holders (the other holders' places in a
  uniform permutation are uniform): the hypergeometric laws of the derivation. When
  k ≥ K − 1 it is the full mesh of Bonawitz et al. 2017 (every other holder).
* **The committee** (``committee``) is the first m holders of a second, independent
  permutation from the same seed (another key derivation).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Iterator

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from ldpem.common.secagg._encoding import binding

__all__ = [
    "SEED_BYTES",
    "NeighbourGraph",
    "committee",
    "graph_seed",
    "permutation",
]

SEED_BYTES = 32
_SEED_TAG = "ldpem secagg+ neighbour graph seed v1"
_GRAPH_PURPOSE = "ldpem secagg+ neighbour graph permutation v1"
_COMMITTEE_PURPOSE = "ldpem secagg+ committee permutation v1"
#: Each derived key produces one keystream only, so a zero nonce is safe (as in masks.py).
_ZERO_NONCE = bytes(16)
_WORD = 1 << 64
#: Keystream bytes fetched at a time (the shuffle of K holders needs about 8·K).
_BLOCK = 8 * 1024


def graph_seed(run_id: str, round_: int, roster_digest: str) -> bytes:
    """SHA-256 of (tag, run id, round, roster digest), length-prefixed: the round's 32-byte
    graph seed. ValueError for an empty run id, a negative or non-integer round, or a
    digest that is not 64 hex digits."""
    if not isinstance(run_id, str) or not run_id:
        raise ValueError(f"run_id must be a non-empty string, got {run_id!r}")
    if isinstance(round_, bool) or not isinstance(round_, int) or round_ < 0:
        raise ValueError(f"round must be a non-negative integer, got {round_!r}")
    if (
        not isinstance(roster_digest, str)
        or len(roster_digest) != 64
        or any(c not in "0123456789abcdef" for c in roster_digest)
    ):
        raise ValueError(
            f"roster_digest must be 64 lower-case hex digits, got {str(roster_digest)[:80]!r}"
        )
    return hashlib.sha256(binding(_SEED_TAG, run_id, round_, roster_digest)).digest()


class _Stream:
    """Uniform integers from the ChaCha20 keystream under a 32-byte key."""

    def __init__(self, key: bytes) -> None:
        self._encryptor = Cipher(algorithms.ChaCha20(key, _ZERO_NONCE), mode=None).encryptor()
        self._words: Iterator[int] = iter(())

    def _word(self) -> int:
        word = next(self._words, None)
        if word is None:
            block = self._encryptor.update(bytes(_BLOCK))
            self._words = (int.from_bytes(block[i : i + 8], "little") for i in range(0, _BLOCK, 8))
            word = next(self._words)
        return word

    def below(self, bound: int) -> int:
        """A uniform integer in [0, bound): a 64-bit word, rejected when it is at or above
        the largest multiple of ``bound`` (so no residue is favoured), modulo ``bound``."""
        limit = _WORD - _WORD % bound
        while True:
            word = self._word()
            if word < limit:
                return word % bound


def _checked_seed(seed: bytes) -> bytes:
    if not isinstance(seed, bytes) or len(seed) != SEED_BYTES:
        size = len(seed) if isinstance(seed, bytes) else type(seed).__name__
        raise ValueError(f"seed must be {SEED_BYTES} bytes, got {size}")
    return seed


def _checked_names(names: Iterable[str]) -> tuple[str, ...]:
    """The holders in canonical (code-point) order; ValueError for none, a non-string or a
    name given twice."""
    listed = list(names)
    if not listed:
        raise ValueError("names must hold at least one holder, got none")
    if bad := [n for n in listed if not isinstance(n, str) or not n]:
        raise ValueError(f"names must be non-empty strings, got {bad[0]!r}")
    ordered = tuple(sorted(listed))
    for first, second in itertools.pairwise(ordered):
        if first == second:
            raise ValueError(f"names must be distinct, got {first!r} twice")
    return ordered


def permutation(names: Iterable[str], seed: bytes, *, purpose: str = _GRAPH_PURPOSE) -> list[str]:
    """The holders ``names`` in the order of a uniformly random permutation drawn from
    ``seed`` (Fisher–Yates over the canonical order, ChaCha20 under
    SHA-256(purpose, seed)). The same names and seed give the same order, whatever order
    the names came in."""
    ordered = list(_checked_names(names))
    key = hashlib.sha256(binding(purpose, _checked_seed(seed))).digest()
    stream = _Stream(key)
    for i in range(len(ordered) - 1, 0, -1):
        j = stream.below(i + 1)
        ordered[i], ordered[j] = ordered[j], ordered[i]
    return ordered


def committee(names: Iterable[str], size: int, seed: bytes) -> frozenset[str]:
    """The round's public committee: the first ``size`` holders of a permutation drawn from
    ``seed`` independently of the graph's (another derived key). All holders when ``size``
    is at least their number."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"committee size must be a positive integer, got {size!r}")
    return frozenset(permutation(names, seed, purpose=_COMMITTEE_PURPOSE)[:size])


class NeighbourGraph:
    """The Harary graph H(k, K) over a seeded random permutation of the K holders ``names``.

    ``k`` is the degree: an even integer ≥ 2, or any integer ≥ K − 1, which gives the full
    mesh (every holder is every other's neighbour). Each holder's neighbours are the k/2
    holders before and the k/2 after it in the permuted cycle. ``neighbours(name)`` is a
    frozenset (the holder itself excluded); the relation is symmetric.
    """

    def __init__(self, names: Iterable[str], k: int, seed: bytes) -> None:
        ordered = _checked_names(names)
        count = len(ordered)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        self.full_mesh = k >= count - 1
        if not self.full_mesh and k % 2:
            raise ValueError(f"k must be even below K - 1 = {count - 1}, got {k}")
        self.k = count - 1 if self.full_mesh else k
        self.names: tuple[str, ...] = ordered
        self.seed = _checked_seed(seed)
        self.order: tuple[str, ...] = tuple(permutation(ordered, seed))
        self._place = {name: i for i, name in enumerate(self.order)}

    def __len__(self) -> int:
        return len(self.names)

    def neighbours(self, name: str) -> frozenset[str]:
        """The k neighbours of ``name``; KeyError (naming it) when it is not a holder."""
        place = self._place.get(name)
        if place is None:
            raise KeyError(f"{name!r} is not a holder of this graph")
        if self.full_mesh:
            return frozenset(self.order[:place] + self.order[place + 1 :])
        half, count = self.k // 2, len(self.order)
        return frozenset(
            self.order[(place + step) % count]
            for offset in range(1, half + 1)
            for step in (offset, -offset)
        )

    def edges(self) -> Iterator[tuple[str, str]]:
        """Every edge once, as (a, b) with a < b."""
        for name in self.order:
            for other in sorted(self.neighbours(name)):
                if name < other:
                    yield name, other
