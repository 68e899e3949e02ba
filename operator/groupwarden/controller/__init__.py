"""The operator: kopf wiring (`handlers`) around a reconcile orchestration that knows no kopf.

Data flow: kopf watch events -> `PolicyRegistry` (parsed specs) -> one `PolicyWorker` per policy
(`scheduler`) -> `Reconciler` (credentials -> pooled Kafka gateway -> per-cluster lock: gather ->
decide_many -> execute) -> status / events / metrics sinks. Only the Lease holder acts.
"""
