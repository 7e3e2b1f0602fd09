"""The stores' lock-free call count loses no call when threads count and read at once."""

from __future__ import annotations

import threading

from idemflow.stores._call_count import CallCount


def test_calls_counted_by_many_threads_while_others_read_add_up_exactly() -> None:
    count = CallCount()
    seen: list[int] = []

    def add() -> None:
        for _ in range(50_000):
            count.add()

    def read() -> None:
        for _ in range(2_000):
            seen.append(count.value)

    threads = [threading.Thread(target=add) for _ in range(4)] + [
        threading.Thread(target=read) for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert count.value == 200_000 == count.value  # reading twice changes nothing
    assert all(0 <= value <= 200_000 for value in seen)
