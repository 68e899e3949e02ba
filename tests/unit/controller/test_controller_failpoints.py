"""The e2e tests' failpoint (controller/failpoints.py): its step site and its request site."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from groupwarden.cleanup.steps import REQUEST_SITE
from groupwarden.controller.failpoints import FailpointError, StepHold


def test_without_a_hold_file_nothing_waits(tmp_path: Path) -> None:
    hold = StepHold(tmp_path)
    hold("DeleteGroup g")
    hold(REQUEST_SITE + "DeleteGroup g")
    assert not (tmp_path / "held").exists()


def test_the_step_hold_lets_the_request_site_through_and_counts_only_steps(tmp_path: Path) -> None:
    (tmp_path / "hold").write_text("1")
    hold = StepHold(tmp_path)
    hold(REQUEST_SITE + "DeleteGroup g")  # not the step site: no wait, the count stays
    assert (tmp_path / "hold").read_text() == "1"
    hold("DeleteGroup g")
    assert (tmp_path / "hold").read_text() == "0"


def test_the_request_hold_waits_at_the_request_and_names_it(tmp_path: Path) -> None:
    (tmp_path / "hold-request").write_text("hold")
    hold = StepHold(tmp_path)
    hold("DeleteGroup g")  # the step site goes on
    passed = threading.Event()
    worker = threading.Thread(target=lambda: (hold(REQUEST_SITE + "DeleteGroup g"), passed.set()))
    worker.start()
    deadline = time.monotonic() + 10
    while not (tmp_path / "held").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert (tmp_path / "held").read_text() == REQUEST_SITE + "DeleteGroup g"
    assert not passed.is_set()
    (tmp_path / "hold-request").unlink()
    worker.join(10)
    assert passed.is_set() and not (tmp_path / "held").exists()


def test_raise_is_the_step_sites_only(tmp_path: Path) -> None:
    (tmp_path / "raise").write_text("raise")
    hold = StepHold(tmp_path)
    hold(REQUEST_SITE + "DeleteGroup g")
    with pytest.raises(FailpointError):
        hold("DeleteGroup g")
