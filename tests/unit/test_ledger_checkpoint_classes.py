"""The classes a ledger checkpoint pickles (`cleanup/checkpoint.py`), by module path. Moving one
(a module renamed, a class moved) leaves every saved checkpoint naming a path that no longer
exists: such a move must bump `checkpoint.FORMAT`, so an older checkpoint is refused cleanly and
the log read again, and update the lists here."""

from __future__ import annotations

import contextlib
import io
import pickle
from pathlib import Path
from typing import Any

import pytest
from test_ledger_checkpoint import cluster, plan

from groupwarden.cleanup.checkpoint import FORMAT
from groupwarden.core.snapshot import GroupKind

pytestmark = pytest.mark.unit

# The checkpoint's format and the groupwarden classes it pickles (module, name).
PINNED_FORMAT = "groupwarden-ledger-checkpoint/2"
PICKLED = {
    ("groupwarden.offsets_log.ledger", "OffsetsLedger"),
    ("groupwarden.offsets_log._state", "ReplayedGroup"),
    ("groupwarden.offsets_log._state", "ClassicState"),
    ("groupwarden.offsets_log._state", "ConsumerState"),
    ("groupwarden.offsets_log.views", "LedgerClassicMember"),
    ("groupwarden.offsets_log.views", "LedgerConsumerMember"),
}


class _Recording(pickle.Unpickler):
    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file)
        self.found: set[tuple[str, str]] = set()

    def find_class(self, module: str, name: str) -> Any:
        self.found.add((module, name))
        return super().find_class(module, name)


def test_the_classes_a_checkpoint_pickles_stay_where_they_are(tmp_path: Path) -> None:
    fake, cache = cluster(), tmp_path / "cache"
    fake.add_group("ci-classic", subscribed=["t"], offsets={("t", 0): 1})
    fake.add_group("ci-consumer", GroupKind.CONSUMER, subscribed=["t"], offsets={("t", 0): 1})
    with contextlib.redirect_stdout(io.StringIO()):
        plan(tmp_path, fake, "--ledger-cache", str(cache))
    [path] = cache.glob("*.ledger")
    unpickler = _Recording(io.BytesIO(path.read_bytes()))
    unpickler.load()
    ours = {(module, name) for module, name in unpickler.found if module.startswith("groupwarden")}
    assert FORMAT == PINNED_FORMAT, "FORMAT changed: update PINNED_FORMAT and PICKLED together"
    assert ours == PICKLED, "a pickled class moved or was added: bump checkpoint.FORMAT, then update PICKLED"
