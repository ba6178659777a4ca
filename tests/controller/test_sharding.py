"""How shards are assigned to pools and shared among replicas: plain data, no cluster."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from resourceslice.sharding import shard_of, share_change


def test_shard_of_is_stable_and_spreads_pools() -> None:
    assert shard_of("node-1", 1) == 0
    counts = Counter(shard_of(f"pool-{i}", 12) for i in range(1200))
    assert set(counts) == set(range(12))
    assert min(counts.values()) > 60  # 100 each on average


def test_shard_of_known_values() -> None:
    """The same in every process (not Python's salted hash()), and in every release: a
    change would move pools between shards while replicas of two releases run."""
    assert [shard_of(name, 12) for name in ("a", "node-1", "fabric-a")] == [10, 6, 10]


def test_share_change_cases() -> None:
    # Alone: take everything.
    assert share_change("a", {"a": 0}, 12) == 12
    # Even shares: nothing to do.
    assert share_change("a", {"a": 4, "b": 4, "c": 4}, 12) == 0
    # Over the ceiling (a replica joined): give the excess back.
    assert share_change("a", {"a": 6, "b": 6, "c": 0}, 12) == -2
    # A starved replica and no excess: only the most loaded (greatest name of equals) gives.
    held = {"a": 3, "b": 3, "c": 3, "d": 3, "e": 0}
    assert [share_change(me, held, 12) for me in sorted(held)] == [0, 0, 0, -1, 3]
    # The least loaded take free shards up to the ceiling; the others wait.
    assert share_change("a", {"a": 2, "b": 4}, 12) == 4
    assert share_change("b", {"a": 2, "b": 4}, 12) == 0


def simulate(held: dict[str, int], shards: int, seed: int) -> dict[str, int]:
    """Rounds of every replica applying share_change, in random order, until nothing moves."""
    rng = random.Random(seed)
    free = shards - sum(held.values())
    for _ in range(100):
        moved = False
        for me in rng.sample(sorted(held), len(held)):
            change = share_change(me, held, shards)
            if change < 0:
                held[me] += change
                free -= change
                moved = True
            elif change > 0 and free:
                taken = min(change, free)
                held[me] += taken
                free -= taken
                moved = True
        if not moved:
            return held
    raise AssertionError(f"no fixed point: {held}")


@pytest.mark.parametrize("shards", [1, 2, 5, 12, 13])
@pytest.mark.parametrize("replicas", [1, 2, 3, 5, 7])
def test_shares_end_within_one_of_each_other(shards: int, replicas: int) -> None:
    names = [f"r{i}" for i in range(replicas)]
    starts = [
        {n: 0 for n in names},  # a cold start
        {n: (shards if i == 0 else 0) for i, n in enumerate(names)},  # all on one
        # One replica died (its shards free), one joined with none.
        {n: (0 if i == replicas - 1 else shards // replicas) for i, n in enumerate(names)},
    ]
    for seed, start in enumerate(starts):
        end = simulate(dict(start), shards, seed)
        assert sum(end.values()) == shards, (start, end)
        assert max(end.values()) - min(end.values()) <= 1, (start, end)
