"""The one application layer both entry points (the CLI's `plan`/`apply` and the operator) use:
the Kafka port (`gateway`), reading a cluster into a snapshot (`gather`), executing a plan
(`execute`) and the guarded, audited step executor (`steps`). No client library, no kopf."""
