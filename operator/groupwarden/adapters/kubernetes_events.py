"""Posts core/v1 Events on a policy (what `kubectl describe cgp` and `kubectl events` show).

Best effort: an Event that cannot be written is logged and dropped; it never fails a run.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from groupwarden.adapters.kubernetes_client import REQUEST_TIMEOUT
from groupwarden.core.crd import API_VERSION, KIND
from groupwarden.core.policy import PolicyRef

log = logging.getLogger(__name__)

COMPONENT = "groupwarden"


class KubernetesEventPoster:
    def __init__(self, api: client.ApiClient, instance: str) -> None:
        self._core = client.CoreV1Api(api)
        self._instance = instance[:128]

    def post(self, ref: PolicyRef, uid: str, event_type: str, reason: str, message: str) -> None:
        now = datetime.now(UTC).replace(microsecond=0)
        body = {
            "metadata": {"name": f"{ref.name}.{uuid.uuid4().hex[:16]}", "namespace": ref.namespace},
            "involvedObject": {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "name": ref.name,
                "namespace": ref.namespace,
                "uid": uid,
            },
            "type": event_type,
            "reason": reason,
            "message": message,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        event = client.CoreV1Event.from_dict(body)
        assert event is not None
        try:
            self._core.create_namespaced_event(ref.namespace, event, _request_timeout=REQUEST_TIMEOUT)
        except (ApiException, OSError) as error:
            status = getattr(error, "status", None)
            log.warning("could not post event %s on %s: %s", reason, ref, status or type(error).__name__)
