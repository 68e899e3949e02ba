"""The one application layer both entry points (the CLI's `plan`/`apply` and the operator) use:
the Kafka port (`gateway`), reading a cluster into a snapshot (`gather`), executing a plan
(`execute`), the guarded, audited step executor (`steps`) and the loop that runs a pass's Enforce
plans by it (`pass_deletions`). No client library, no kopf; what every path to a cluster shares
(connection settings, redaction, the retry policy, the stop flag) is below it, in `connectivity/`."""
