"""The kopf wiring: only watch handlers (kopf writes nothing on the objects), routed to the Controller."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest

from groupwarden.controller.handlers import build_kopf_registry, operator_settings
from groupwarden.core.policy import PolicyRef

pytestmark = pytest.mark.unit


class RecordingController:
    def __init__(self) -> None:
        self.observed: list[str] = []
        self.forgotten: list[PolicyRef] = []

    def observe(self, body: Any) -> None:
        self.observed.append(body["metadata"]["name"])

    def forget(self, ref: PolicyRef) -> None:
        self.forgotten.append(ref)


def test_only_watch_handlers_are_registered_so_kopf_adds_no_finalizers() -> None:
    registry = build_kopf_registry(RecordingController())  # type: ignore[arg-type]
    assert len(registry._watching.get_all_handlers()) == 1
    assert registry._changing.get_all_handlers() == [] and registry._spawning.get_all_handlers() == []
    settings = operator_settings()
    assert not settings.posting.enabled and settings.scanning.disabled


def test_watch_events_go_to_the_controller() -> None:
    controller = RecordingController()
    registry = build_kopf_registry(controller)  # type: ignore[arg-type]
    handler = registry._watching.get_all_handlers()[0]
    raw = {"metadata": {"name": "p", "namespace": "team", "uid": "u"}, "spec": {}}
    body = kopf.Body(raw)
    asyncio.run(handler.fn(type=None, body=body))  # type: ignore[call-arg]
    asyncio.run(handler.fn(type="DELETED", body=body))  # type: ignore[call-arg]
    assert controller.observed == ["p"] and controller.forgotten == [PolicyRef("team", "p")]
