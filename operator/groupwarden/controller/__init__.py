"""The operator: kopf wiring (`handlers`) around a reconcile orchestration that knows no kopf.

Data flow: kopf watch events -> `Controller` (`controller`: the `PolicyRegistry` of parsed specs)
-> one `PolicyWorker` per policy (`worker`) -> `Reconciler` (credentials -> pooled Kafka gateway ->
per-cluster lock: the cleanup layer's gather -> decide_many -> guarded execute) -> status / events /
metrics sinks. Only the Lease holder acts.
"""
