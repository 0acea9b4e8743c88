from __future__ import annotations

import json
import threading

import pytest

from mnemis.models.ledger import Ledger


def test_record_merge_reset_save(tmp_path):
    a, b = Ledger(), Ledger()
    a.record("extract", calls=3, prompt_tokens=30, completion_tokens=9, wall_s=0.5)
    b.record("extract", calls=1, failures=1, retries=2)
    b.record("judge", calls=2, cache_hits=2)
    a.merge(b)
    d = a.to_dict()
    assert d["stages"]["extract"]["calls"] == 4 and d["stages"]["extract"]["failures"] == 1
    assert d["total"]["calls"] == 6 and d["total"]["cache_hits"] == 2
    path = a.save(tmp_path / "sub" / "ledger.json")
    assert json.loads(path.read_text()) == d
    assert Ledger.load(path).to_dict() == d
    a.reset()
    assert a.to_dict()["total"]["calls"] == 0


def test_unknown_counter_rejected():
    with pytest.raises(KeyError):
        Ledger().record("x", bogus=1)


def test_thread_safe():
    led = Ledger()

    def work():
        for _ in range(2000):
            led.record("s", calls=1, prompt_tokens=2)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert led.stage("s").calls == 16000 and led.stage("s").prompt_tokens == 32000
