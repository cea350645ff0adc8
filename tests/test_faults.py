"""The fault-injection suite (``tests/fault_cases.py``): every case must be handled — the work
done, or one line naming what is wrong with exit code 2 and the store still loading.
``benchmarks/bench_reliability.py`` runs the same cases and reports the counts by cause."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.fault_cases import CASES, build_store, run_case


@pytest.fixture(scope="module")
def base_store(tmp_path_factory):
    return build_store(tmp_path_factory.mktemp("faults") / "store")


@pytest.mark.parametrize("item", CASES, ids=[f"{c.cause}: {c.name}" for c in CASES])
def test_fault_is_handled(item, base_store, tmp_path):
    handled, note = run_case(item, tmp_path, base_store)
    if handled is None:
        pytest.skip(note)
    assert handled, f"{item.cause}: {item.name} was not handled"


def test_the_suite_covers_every_cause():
    counts = Counter(c.cause for c in CASES)
    assert set(counts) == {
        "damaged store file", "unusable path", "concurrent writers", "removed files", "bad setting",
        "odd question", "damaged cache", "degraded route",
    }
    assert counts["damaged store file"] >= 36 and counts["bad setting"] >= 30 and counts["odd question"] >= 15
    assert len(CASES) >= 100
