"""The one module that registers kopf handlers. They are thin: they feed watch events to the
`Controller`; the work happens in its per-policy workers.

Only `on.event` is used (no on.create/update, no daemons), so kopf writes nothing on the policy
objects: no finalizers, no last-handled-configuration annotations, and deleting a namespace never
waits for the operator. Deletion stops work through the DELETED watch event.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from groupwarden.controller.controller import Controller
from groupwarden.core.crd import GROUP, PLURAL, VERSION
from groupwarden.core.policy import PolicyRef


def build_kopf_registry(controller: Controller) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # The official client's loader: $KUBECONFIG (set from --kubeconfig) or the pod's account.
        return kopf.login_via_client(**kwargs)

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def policy_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        if type == "DELETED":
            controller.forget(PolicyRef(body.metadata.namespace or "default", body.metadata.name or ""))
        else:
            controller.observe(body)

    @kopf.on.cleanup(registry=registry)
    async def stop_workers(**_: Any) -> None:
        # kopf waits 5s for tasks it did not start before cancelling them: stop ours at once.
        await controller.shutdown()

    return registry


def operator_settings(verbose: bool = False) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    # kopf would turn every log line of a handler into an Event; our events are chosen (events.py).
    settings.posting.enabled = False
    # Strict mode: serve the CRD found at startup and the namespaces given. kopf's dynamic
    # discovery would need cluster-wide list/watch on CRDs and namespaces (and retries 9 times,
    # ~20s, when RBAC forbids them); least privilege wins. Install the CRD before the operator.
    settings.scanning.disabled = True
    if not verbose:
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    return settings
