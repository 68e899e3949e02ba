"""The fleet audit: `__consumer_offsets` of one or many clusters -> ledger -> policy plans, on Spark.

Entry point code (like `commands/` and `controller/`): it wires Spark to the pure core. Decoding
calls the core codec on the workers (`groupwarden.offsets_log`), the driver decides with the same
`decide_many` as `groupwarden plan`. pyspark, pyarrow and numpy are imported only by these modules
(an import-linter contract), which only `groupwarden audit` imports, so the operator and the CLI run
without the `[spark]` extra.
"""
