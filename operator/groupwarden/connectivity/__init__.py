"""What every path to a Kafka cluster shares, below the adapters, the application layer and the
fleet audit: the connection settings parsed from client properties (`settings`), the secrets they
hold and their redaction from any text (`redaction`), the one retry policy of every request path
(`retry`), the process's stop flag that ends every retry and wait (`stopping`), and handing the
clients' freed memory back to the system (`process_memory`). No client library, no application
logic: the adapters build their clients from `settings.ConnectionSettings` and ask `retry` what to
do."""
