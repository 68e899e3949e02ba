"""The operator side of the race campaign: `groupwarden run` as a process deletes a trial's groups.

Used by `bench/race_campaign.py --operator-every K` (needs KUBECONFIG: the devstack's API server).
One operator process and one namespace for the campaign; a trial of the operator creates an
Enforce policy over its groups at the trial's apply moment (a new policy runs at once; its 1 h
interval makes that the only run in the trial), waits until the run's status is written, then
reads what happened from the operator's audit log lines (one JSON record per intent / outcome)
and its Events.

What the oracle gets differs from an `apply` trial, and is dated conservatively:
- a request's window is [its intent record's time, its outcome record's time + 1 ms] (the intent
  is written before the request, the outcome after the answer; the times have milliseconds);
- the run's decision (`now`) lies between the policy's creation and the intent;
- when the operator last read the log / offsets is not visible from outside: a lost commit made
  after the cut-off is `lost-commit-read-unknown`, counted with the wrongful ones until examined.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import race_oracle as oracle
from gwtest.audit_log import audit_records_of_log
from gwtest.k8s import api_client, create_namespace, delete_namespace
from gwtest.operator import (
    OperatorProcess,
    create_policy,
    delete_policy,
    ensure_crd,
    events_of,
    fast_enforce_manifest,
    wait_for_status,
)


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class OperatorDriver:
    def __init__(self, bootstrap: str, prefix: str, workdir: Path, group_types: Sequence[str] = ()) -> None:
        self.bootstrap = bootstrap
        self.group_types = list(group_types)
        self.prefix = prefix
        self.api = api_client(os.environ["KUBECONFIG"])
        ensure_crd(self.api)
        self.namespace = f"{prefix}-op"[:63]
        create_namespace(self.api, self.namespace)
        self.log_path = workdir / "operator.log"
        self.process = OperatorProcess(os.environ["KUBECONFIG"], [self.namespace], self.log_path).start()
        self._read_at = 0

    def close(self) -> None:
        if self.process.running:
            self.process.stop()
        delete_namespace(self.api, self.namespace)
        self.api.close()

    def _records(self) -> list[dict[str, Any]]:
        """Audit records written since the last call (the log is only appended to)."""
        with self.log_path.open("rb") as file:
            file.seek(self._read_at)
            data = file.read()
        complete = data.rfind(b"\n") + 1
        self._read_at += complete
        # --log-format json: each record is the signed message of a JSON log line, verified here
        return audit_records_of_log(data[:complete].decode(errors="replace"))

    def run(
        self,
        number: int,
        groups: Sequence[str],
        gather_started: threading.Event,
        delete_sent: threading.Event,
    ) -> tuple[dict[str, Any], list[dict[str, Any]], list[oracle.Deletion], list[tuple[float, float]], float]:
        """One run of the operator over the trial's groups: (plan-like document, audit records,
        deletions, decision windows, the policy's creation time)."""
        name = f"t{number}"
        manifest = fast_enforce_manifest(
            name,
            self.namespace,
            self.bootstrap,
            [f"{self.prefix}-t{number}-*"],
            rules={
                "emptyGroupRetention": "1s",
                "unsubscribedOffsetRetention": "1s",
                "simpleGroupOffsetRetention": "1s",
            },
            interval="1h",
            **(
                {"selector": {"include": [f"{self.prefix}-t{number}-*"], "groupTypes": self.group_types}}
                if self.group_types
                else {}
            ),
        )
        records: list[dict[str, Any]] = []
        done = threading.Event()

        def watch() -> None:
            # Fires the "delete" triggers when the first intent of this trial is on the log.
            while not done.is_set():
                new = [r for r in self._records() if r.get("group") in groups]
                records.extend(new)
                if any(r.get("type") == "intent" for r in new):
                    delete_sent.set()
                time.sleep(0.003)

        created = time.time()
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            create_policy(self.api, manifest)
            gather_started.set()
            wait_for_status(self.api, self.namespace, name, timeout=120, extra=lambda p: _finished(p))
            time.sleep(0.05)  # the last outcome line may still be in the pipe
        finally:
            done.set()
            watcher.join()
        records.extend(r for r in self._records() if r.get("group") in groups)
        events = events_of(self.api, self.namespace, name)
        delete_policy(self.api, self.namespace, name)
        return _plan_of(records, events, groups), records, *_deletions(records, created), created


def _finished(policy: dict[str, Any]) -> bool:
    conditions = (policy.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    return ready is not None and ready.get("reason") not in (None, "", "Reconciling")


def _plan_of(
    records: Sequence[dict[str, Any]], events: Sequence[dict[str, str]], groups: Sequence[str]
) -> dict[str, Any]:
    """What `apply -o json` would have said, from the audit intents and the Events: the requested
    actions, and the ones the re-check dropped (ActionSkipped "changed since the plan")."""
    actions = [
        {
            "action": r["action"],
            "group": r["group"],
            "partitions": [
                {"topic": p["topic"], "partition": p["partition"]} for p in r.get("partitions", [])
            ],
        }
        for r in records
        if r.get("type") == "intent"
    ]
    outcomes = []
    for event in events:
        if event["reason"] != "ActionSkipped" or "changed since the plan" not in event["message"]:
            continue
        for group in groups:
            if f"group {group}:" in event["message"]:
                kind = "DeleteOffsets" if "delete offsets" in event["message"] else "DeleteGroup"
                actions.append({"action": kind, "group": group, "partitions": []})
                outcomes.append({"group": group, "result": "SkippedBecameActive"})
    return {"actions": actions, "outcomes": outcomes}


def _deletions(
    records: Sequence[dict[str, Any]], created: float
) -> tuple[list[oracle.Deletion], list[tuple[float, float]]]:
    intents = {r["actionId"]: r for r in records if r.get("type") == "intent"}
    deletions = []
    checks = []
    for outcome in (r for r in records if r.get("type") == "outcome"):
        intent = intents.get(outcome["actionId"])
        if intent is None:
            continue
        start, end = _epoch(intent["timestamp"]), _epoch(outcome["timestamp"]) + 0.001
        # The step's re-check decided after the policy existed and before it wrote the intent
        # (strictly before: the oracle takes the last decision that ended before the request).
        checks.append((created, start - 1e-6))
        error = None if outcome["result"] in ("Deleted", "PartiallyDeleted") else outcome.get("error") or ""
        if outcome["action"] == "DeleteGroup":
            deletions.append(oracle.Deletion("groups", outcome["group"], (), start, end, _name(error)))
        else:
            parts = {
                (p["topic"], p["partition"]): _name(p.get("error")) for p in outcome.get("partitions", [])
            }
            group_error = _name(error) if not parts else None
            deletions.append(
                oracle.Deletion("offsets", outcome["group"], tuple(parts), start, end, group_error, parts)
            )
    return deletions, checks


def _name(error: str | None) -> str | None:
    """`NON_EMPTY_GROUP: ...` -> `NON_EMPTY_GROUP` (None stays None)."""
    if error is None:
        return None
    return error.split(":", 1)[0].strip() or "UNKNOWN"
