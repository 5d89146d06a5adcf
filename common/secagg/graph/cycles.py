"""The expander graph of SecAgg+: the union of L = k/2 independent uniformly random
Hamiltonian cycles over the K holders (docs/SECAGG_GRAPH.md, "Open: the graph at the
mesh's accuracy", point 4).

Unlike the Harary graph of ``graph.py``, whose components under exclusion are arcs of one
permuted cycle, a union of independent random cycles expands, which is what lets the noise
accounting count more honest noise shares in every sum the coordinator can learn. The
derivation uses exactly these facts, which this module guarantees:

* **each cycle is a uniform random cyclic order** of the holders (up to a tie of two
  128-bit keys, below);
* **the L cycles are independent** (one ChaCha20 keystream per cycle, under keys derived
  from (cycle index, seed) by SHA-256: indistinguishable from independent as long as
  ChaCha20 is a PRF);
* **a holder's neighbours are its predecessor and successor in every cycle**; repeats
  merge, so a holder has at most k distinct neighbours (at least 2: K ≥ 4), and the relation
  is symmetric.

**Cycle j** (``cycle_order``): the keystream of ChaCha20 under key
SHA-256(binding(purpose, j, seed)) (length-prefixed, as ``graph.permutation`` derives its
keys, so the index and the seed cannot be shifted into each other; a zero nonce, one
keystream per key) gives holder i, in the canonical code-point order of the names, the
128-bit key (w_2i, w_2i+1) of two little-endian 64-bit words, w_2i the high one. The cycle
visits the holders in increasing order of key, ties broken by canonical index, and closes
from the largest back to the smallest. With K keys independent and uniform on 128 bits the
order is uniform over the K! orders, hence the cyclic order uniform over the (K − 1)!
cyclic orders, except on a tie of two keys: probability at most C(K, 2)·2⁻¹²⁸ per cycle
(below 2⁻¹⁰² at K = 10⁴), where the tie-break favours the canonical order.

**Cost.** An agent needs its own neighbourhood only: ``CycleGraph.neighbours`` finds, per
cycle, the holders with the next larger and next smaller key by vectorised comparisons,
O(L·K) without sorting, and keeps nothing of the L·K·16 bytes of keystream (14 MB at
K = 10⁴, L = 87, per graph: a process that simulates many agents holds one graph each). The
coordinator needs everyone's: from the second holder asked about, ``neighbours`` answers
from ``adjacency()``, built once with one lexsort per cycle and kept. Both give the same
sets (tested).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from numpy.typing import NDArray

from ldpem.common.secagg._encoding import binding
from ldpem.common.secagg.graph.harary import _checked_names, _checked_seed

__all__ = ["CycleGraph", "cycle_key", "cycle_order"]

_CYCLE_PURPOSE = "ldpem secagg+ expander cycle order v1"
#: Each derived key produces one keystream only, so a zero nonce is safe (as in masks.py).
_ZERO_NONCE = bytes(16)
#: Keystream bytes per holder and cycle: one 128-bit key.
_KEY_BYTES = 16
_MAX_WORD = np.uint64(2**64 - 1)

Words = NDArray[np.uint64]
Indices = NDArray[np.intp]


def cycle_key(index: int, seed: bytes) -> bytes:
    """SHA-256(binding(purpose, ``index``, ``seed``)): the 32-byte ChaCha20 key of cycle
    ``index``. ValueError for a negative or non-integer index or a seed that is not 32
    bytes."""
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"cycle index must be a non-negative integer, got {index!r}")
    return hashlib.sha256(binding(_CYCLE_PURPOSE, index, _checked_seed(seed))).digest()


def _holder_keys(index: int, seed: bytes, count: int) -> tuple[Words, Words]:
    """The high and low 64-bit words of the ``count`` holders' keys in cycle ``index``,
    two arrays of shape (count,), holder i in canonical order at place i."""
    encryptor = Cipher(algorithms.ChaCha20(cycle_key(index, seed), _ZERO_NONCE), None).encryptor()
    stream = encryptor.update(bytes(_KEY_BYTES * count))
    words = np.frombuffer(stream, dtype="<u8").reshape(count, 2).astype(np.uint64)
    return words[:, 0], words[:, 1]


def _order(high: Words, low: Words) -> Indices:
    """Canonical indices in increasing (high, low) order; lexsort is stable, so ties keep
    the canonical order."""
    return np.lexsort((low, high)).astype(np.intp)


def cycle_order(names: Iterable[str], index: int, seed: bytes) -> tuple[str, ...]:
    """Cycle ``index`` over the holders ``names``: their cyclic order, starting from the
    holder with the smallest key (the module docstring has the derivation). The same names
    and seed give the same cycle, whatever order the names came in."""
    ordered = _checked_names(names)
    high, low = _holder_keys(index, seed, len(ordered))
    return tuple(ordered[i] for i in _order(high, low))


def _least(candidates: NDArray[np.bool_], high: Words, low: Words) -> Indices:
    """Per row, the column of the smallest (high, low, column) among ``candidates``
    (shape (L, K), at least one per row): two masked minima, then the first column left."""
    top = np.where(candidates, high, _MAX_WORD).min(axis=1, keepdims=True)
    left: NDArray[np.bool_] = candidates & (high == top)
    bottom = np.where(left, low, _MAX_WORD).min(axis=1, keepdims=True)
    left &= low == bottom
    return np.asarray(left.argmax(axis=1), dtype=np.intp)


def _greatest(candidates: NDArray[np.bool_], high: Words, low: Words) -> Indices:
    """Per row, the column of the largest (high, low, column) among ``candidates``."""
    zero = np.uint64(0)
    top = np.where(candidates, high, zero).max(axis=1, keepdims=True)
    left: NDArray[np.bool_] = candidates & (high == top)
    bottom = np.where(left, low, zero).max(axis=1, keepdims=True)
    left &= low == bottom
    return np.asarray(left.shape[1] - 1 - left[:, ::-1].argmax(axis=1), dtype=np.intp)


def _around(place: int, high: Words, low: Words) -> tuple[Indices, Indices]:
    """The successor and predecessor of canonical holder ``place`` in every cycle (rows of
    ``high``, ``low``: shape (L, K)), without sorting: the next larger key (the smallest
    key when ``place`` holds the largest) and the next smaller one (the largest when it
    holds the smallest)."""
    own_high, own_low = high[:, place : place + 1], low[:, place : place + 1]
    later = np.arange(high.shape[1]) > place
    after = (high > own_high) | (
        (high == own_high) & ((low > own_low) | ((low == own_low) & later))
    )
    before = ~after
    before[:, place] = False
    # A holder with the largest key is followed by the smallest: look among everyone.
    after[~after.any(axis=1)] = True
    before[~before.any(axis=1)] = True
    return _least(after, high, low), _greatest(before, high, low)


class CycleGraph:
    """The union of L = k/2 independent uniformly random Hamiltonian cycles over the K
    holders ``names``, drawn from ``seed``.

    ``k`` is even in [2, K − 2]: the expander is used only where it is sparser than the
    full mesh, so ``full_mesh`` is always False. ``neighbours(name)`` is a frozenset of at
    most k and at least 2 holders (the holder itself excluded); the relation is symmetric.
    ``cycle(j)`` is cycle j's cyclic order, j in [0, L).
    """

    def __init__(self, names: Iterable[str], k: int, seed: bytes) -> None:
        ordered = _checked_names(names)
        count = len(ordered)
        if isinstance(k, bool) or not isinstance(k, int) or k % 2 or not 2 <= k <= count - 2:
            raise ValueError(f"k must be even in [2, K - 2 = {count - 2}], got {k!r}")
        self.names: tuple[str, ...] = ordered
        self.k = k
        self.seed = _checked_seed(seed)
        self.full_mesh = False
        #: L, the number of cycles.
        self.cycle_count = k // 2
        self._place = {name: i for i, name in enumerate(ordered)}
        self._orders: Indices | None = None  # (L, K), set with the adjacency
        self._adjacency: Mapping[str, frozenset[str]] | None = None
        self._first: tuple[str, frozenset[str]] | None = None

    def __len__(self) -> int:
        return len(self.names)

    def _keys(self) -> tuple[Words, Words]:
        """Every cycle's holder keys: high and low words, shape (L, K) each."""
        pairs = [_holder_keys(j, self.seed, len(self.names)) for j in range(self.cycle_count)]
        return np.stack([h for h, _ in pairs]), np.stack([lo for _, lo in pairs])

    def neighbours(self, name: str) -> frozenset[str]:
        """The neighbours of ``name``: its predecessor and successor in every cycle.
        KeyError (naming it) when it is not a holder.

        The first holder asked about is answered pointwise (O(L·K), nothing kept but the
        answer): all an agent needs. From the second distinct holder on, the answer comes
        from ``adjacency()``, built once: the coordinator asks about everyone."""
        place = self._place.get(name)
        if place is None:
            raise KeyError(f"{name!r} is not a holder of this graph")
        # Read each cache once, answer from locals: two threads may race to fill a cache
        # (the work is then done twice), never to answer one holder with another's set.
        adjacency, first = self._adjacency, self._first
        if adjacency is not None:
            return adjacency[name]
        if first is None:
            following, preceding = _around(place, *self._keys())
            found = frozenset(self.names[i] for i in np.union1d(following, preceding))
            self._first = name, found
            return found
        if first[0] == name:
            return first[1]
        return self.adjacency()[name]

    def adjacency(self) -> Mapping[str, frozenset[str]]:
        """Every holder's neighbours, built once (one lexsort per cycle) and kept: a
        read-only mapping, so that no caller can change what the next one is told."""
        if self._adjacency is None:
            high, low = self._keys()
            orders = np.stack([_order(h, lo) for h, lo in zip(high, low, strict=True)])
            rows = np.arange(self.cycle_count)[:, None]
            following = np.empty_like(orders)
            preceding = np.empty_like(orders)
            following[rows, orders] = np.roll(orders, -1, axis=1)
            preceding[rows, orders] = np.roll(orders, 1, axis=1)
            # One row per holder: its 2L neighbour indices, repeats merged by the frozenset.
            around = np.concatenate([following, preceding]).T.tolist()
            names = self.names
            self._adjacency = MappingProxyType(
                {
                    name: frozenset([names[i] for i in row])
                    for name, row in zip(names, around, strict=True)
                }
            )
            self._orders = orders
        return self._adjacency

    def cycle(self, index: int) -> tuple[str, ...]:
        """Cycle ``index``'s cyclic order, from the holder with the smallest key;
        ValueError unless ``index`` is an integer in [0, L)."""
        if (
            isinstance(index, bool)
            or not isinstance(index, int)
            or not 0 <= index < self.cycle_count
        ):
            raise ValueError(
                f"cycle index must be an integer in [0, L = {self.cycle_count}), got {index!r}"
            )
        if self._orders is not None:
            return tuple(self.names[i] for i in self._orders[index])
        return cycle_order(self.names, index, self.seed)

    def edges(self) -> Iterator[tuple[str, str]]:
        """Every edge once, as (a, b) with a < b."""
        adjacency = self.adjacency()
        for name in self.names:
            for other in sorted(adjacency[name]):
                if name < other:
                    yield name, other
