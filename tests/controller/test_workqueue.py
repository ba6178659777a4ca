from __future__ import annotations

import threading

import pytest

from resourceslice.testing import wait_until
from resourceslice.workqueue import ExponentialBackoff, TokenBucket, WorkQueue
from support.fakes import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(clock: FakeClock) -> WorkQueue[str]:
    return WorkQueue(clock)


def drain(queue: WorkQueue[str]) -> list[str]:
    items = []
    while (item := queue.get(timeout=0)) is not None:
        items.append(item)
        queue.done(item)
    return items


def test_add_deduplicates_and_keeps_order(queue: WorkQueue[str]) -> None:
    for item in ["a", "b", "a", "c", "b"]:
        queue.add(item)
    assert len(queue) == 3
    assert drain(queue) == ["a", "b", "c"]


def test_item_added_while_processing_comes_back_after_done(queue: WorkQueue[str]) -> None:
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")
    # Not handed out twice at once: the worker still holds it.
    assert queue.get(timeout=0) is None
    queue.done("a")
    assert queue.get(timeout=0) == "a"


def test_add_after_waits_for_the_clock(queue: WorkQueue[str], clock: FakeClock) -> None:
    queue.add_after("a", 30)
    assert queue.get(timeout=0) is None
    assert queue.pending_after("a") == pytest.approx(30)
    clock.advance(29.9)
    assert queue.get(timeout=0) is None
    clock.advance(0.1)
    assert queue.get(timeout=0) == "a"
    assert queue.pending_after("a") is None


def test_add_after_keeps_the_earlier_time(queue: WorkQueue[str], clock: FakeClock) -> None:
    queue.add_after("a", 10)
    queue.add_after("a", 60)
    clock.advance(10)
    assert drain(queue) == ["a"]
    clock.advance(60)
    assert drain(queue) == []
    queue.add_after("b", 60)
    queue.add_after("b", 5)
    clock.advance(5)
    assert drain(queue) == ["b"]


def test_add_spaced_is_at_once_for_a_lone_change_and_spaced_in_a_burst(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    queue.add_spaced("a", 1.0)  # the first: at once
    assert drain(queue) == ["a"]
    clock.advance(0.25)
    for _ in range(64):  # a burst right after: one item, when the second is over
        queue.add_spaced("a", 1.0)
        clock.advance(1 / 256)
    assert queue.get(timeout=0) is None
    assert queue.pending_after("a") == pytest.approx(0.5)
    clock.advance(0.5)
    assert drain(queue) == ["a"]
    clock.advance(1.0)
    queue.add_spaced("a", 1.0)  # the interval since the last one let through is over
    assert drain(queue) == ["a"]


def test_add_spaced_is_not_delayed_by_other_adds(queue: WorkQueue[str], clock: FakeClock) -> None:
    # Taken for another reason (a watch event's sync): a change that comes next is not
    # held back, only changes after another add_spaced are.
    queue.add("a")
    assert drain(queue) == ["a"]
    clock.advance(0.1)
    queue.add_spaced("a", 1.0)
    assert drain(queue) == ["a"]
    clock.advance(0.1)
    queue.add_spaced("a", 1.0)
    assert queue.get(timeout=0) is None
    assert queue.pending_after("a") == pytest.approx(0.9)


def test_non_positive_delay_adds_at_once(queue: WorkQueue[str]) -> None:
    queue.add_after("a", 0)
    assert queue.get(timeout=0) == "a"


def test_rate_limited_backoff_doubles_and_forget_resets(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    delays = []
    for _ in range(4):
        queue.add_rate_limited("a")
        delays.append(queue.pending_after("a"))
        clock.advance(1)
        assert drain(queue) == ["a"]
    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04])
    assert queue.num_requeues("a") == 4
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    queue.add_rate_limited("a")
    assert queue.pending_after("a") == pytest.approx(0.005)


def test_backoff_is_capped() -> None:
    backoff: ExponentialBackoff[str] = ExponentialBackoff(base=0.005, max_delay=1000)
    delays = [backoff.when("a") for _ in range(100)]
    assert max(delays) == 1000
    assert delays[-1] == 1000
    assert backoff.when("b") == 0.005  # per item


def test_token_bucket_allows_a_burst_then_ten_per_second(clock: FakeClock) -> None:
    bucket = TokenBucket(clock, qps=10, burst=100)
    assert [bucket.when() for _ in range(100)] == [0.0] * 100
    assert bucket.when() == pytest.approx(0.1)
    assert bucket.when() == pytest.approx(0.2)
    clock.advance(10)  # refills 100 tokens, minus the two reserved
    assert bucket.when() == 0.0


def test_overall_limit_wins_over_a_short_item_backoff(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    for i in range(100):
        queue.add_rate_limited(f"item-{i}")
    queue.add_rate_limited("late")
    # Its own backoff is 5 ms, but the bucket is empty: it waits for a token.
    assert queue.pending_after("late") == pytest.approx(0.1)


def test_shutdown_wakes_a_blocked_get(queue: WorkQueue[str]) -> None:
    got: list[str | None] = []
    taker = threading.Thread(target=lambda: got.append(queue.get()))
    taker.start()
    queue.shutdown()
    taker.join(5)
    assert not taker.is_alive()
    assert got == [None]
    queue.add("a")
    assert queue.get(timeout=0) is None
    assert queue.shutting_down


def test_blocked_get_wakes_for_an_add(queue: WorkQueue[str]) -> None:
    got: list[str | None] = []
    taker = threading.Thread(target=lambda: got.append(queue.get(timeout=10)))
    taker.start()
    queue.add("a")
    taker.join(10)
    assert got == ["a"]


def test_get_times_out() -> None:
    assert WorkQueue[str]().get(timeout=0.01) is None


def test_get_times_out_on_the_queue_clock(queue: WorkQueue[str], clock: FakeClock) -> None:
    got: list[str | None] = []
    taker = threading.Thread(target=lambda: got.append(queue.get(timeout=100)))
    taker.start()

    def moved_past_the_deadline() -> bool:
        # Time passes on the queue's clock only; the add wakes the taker to look at it.
        clock.advance(100)
        queue.add_after("later", 1e9)
        return not taker.is_alive()

    wait_until(moved_past_the_deadline, 10)
    assert got == [None]


def test_add_spaced_forgets_items_whose_interval_is_over(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    # Pools come and go (a name per node, per generation of hardware): what add_spaced
    # remembers of each must not outlive its interval for long.
    for i in range(10_000):
        queue.add_spaced(f"pool-{i}", 1.0)
        assert queue.get(timeout=0) == f"pool-{i}"
        queue.done(f"pool-{i}")
        clock.advance(0.5)
    assert queue.spaced() <= 130


def test_one_item_is_never_processed_by_two_workers_at_once() -> None:
    queue: WorkQueue[int] = WorkQueue()
    lock = threading.Lock()
    active: set[int] = set()
    overlaps: list[int] = []
    processed = 0

    def work() -> None:
        nonlocal processed
        while (item := queue.get()) is not None:
            with lock:
                if item in active:
                    overlaps.append(item)
                active.add(item)
            # Adds of the item being processed, from elsewhere, while it is processed.
            queue.add(item)
            threading.Event().wait(0.0005)
            with lock:
                active.discard(item)
                processed += 1
            queue.done(item)

    workers = [threading.Thread(target=work) for _ in range(4)]
    for worker in workers:
        worker.start()
    for _ in range(200):
        for item in range(3):
            queue.add(item)
    wait_until(lambda: processed >= 600, 30)
    queue.shutdown()
    for worker in workers:
        worker.join(10)
    assert overlaps == []


def test_wait_idle_waits_for_delayed_and_processing_items(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    queue.add_after("a", 5)
    assert not queue.wait_idle(0)
    clock.advance(5)
    assert queue.get(timeout=0) == "a"
    assert not queue.wait_idle(0)  # being processed
    idle = threading.Thread(target=lambda: results.append(queue.wait_idle(10)))
    results: list[bool] = []
    idle.start()
    queue.done("a")
    idle.join(10)
    assert results == [True]
    queue.shutdown()
    assert not queue.wait_idle(0)


def test_processing_an_item_serves_its_delayed_add(queue: WorkQueue[str], clock: FakeClock) -> None:
    # E.g. the re-check of a write the TTL later: a sync that runs first sees everything up
    # to now, and queues the re-check again if it is still needed.
    queue.add_after("a", 60)
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    assert queue.pending_after("a") is None
    queue.done("a")
    assert queue.wait_idle(0)
