"""A private broker whose PROXIED listener is reached through Toxiproxy (docs/fault-injection.md).

A Kafka client talks to the address the broker *advertises* after bootstrapping, so a proxy in
front of an ordinary listener would be bypassed. The private broker (devstack/kafka.sh with its
own DEVSTACK_DIR and free ports; the shared devstack broker is never restarted or reconfigured)
gets a PROXIED listener bound on one port and advertised at the proxy's port: clients that
bootstrap through the proxy stay behind it, while the PLAINTEXT listener stays direct for the
tests' own clients (creating groups, the oracle) so that faults hit groupwarden only.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gwtest.env import REPO, exported_by
from gwtest.ports import free_port
from gwtest.toxiproxy import Proxy, ToxiproxyServer


def purge_private_kafka(env: dict[str, str]) -> None:
    """Stop the private broker(s) that devstack/kafka.sh started with `env` and drop their data
    (best effort: a teardown must not hide the test's own failure)."""
    subprocess.run(
        [str(REPO / "devstack" / "kafka.sh"), "down", "--purge"],
        env=env,
        check=False,
        capture_output=True,
        timeout=180,
    )


def private_broker_env(directory: Path, port: int, **extra: str) -> dict[str, str]:
    """devstack/kafka.sh's environment for a single-node broker of a test's own: its own
    directory, free ports (PLAINTEXT at `port`), no pod listener, a small heap."""
    return {
        **os.environ,
        "DEVSTACK_DIR": str(directory),
        "KAFKA_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(free_port()),
        "KAFKA_SASL_PORT": str(free_port()),
        "KAFKA_POD_HOST": "none",
        "KAFKA_HEAP_OPTS": "-Xms128m -Xmx512m",
        **extra,
    }


class PrivateBroker:
    """Start/stop of a throwaway broker by devstack/kafka.sh with its own `env` (DEVSTACK_DIR,
    ports): for outages and restarts the shared devstack broker must never have."""

    env: dict[str, str]

    def _script(self, *args: str) -> None:
        done = subprocess.run(
            [str(REPO / "devstack" / "kafka.sh"), *args],
            env=self.env,
            check=False,
            capture_output=True,
            text=True,
            timeout=240,
        )
        if done.returncode != 0:  # the script's own account (the broker log's tail) says why
            raise RuntimeError(f"kafka.sh {' '.join(args)} failed: {done.stderr[-4000:]}")

    def up(self) -> None:
        self._script("up")

    def down(self) -> None:
        self._script("down")


@dataclass
class ThrowawayBroker(PrivateBroker):
    """A single-node broker of a module's own: its log holds only what the module wrote, so what
    a test reads in whole (every record of `__consumer_offsets`, every group) does not depend on
    how many groups the shared devstack broker holds. `exported` is its kafka.env (the SASL_SSL
    listener's address, user, password file and CA, as the devstack's)."""

    bootstrap: str  # PLAINTEXT listener
    env: dict[str, str]
    exported: dict[str, str]


@contextmanager
def throwaway_broker(directory: Path) -> Iterator[ThrowawayBroker]:
    port = free_port()
    env = private_broker_env(directory, port)
    broker = ThrowawayBroker(f"127.0.0.1:{port}", env, {})
    try:
        broker.up()
        broker.exported = exported_by(directory / "kafka.env")
        yield broker
    finally:
        purge_private_kafka(env)


@dataclass
class ProxiedBroker(PrivateBroker):
    direct: str  # PLAINTEXT listener: the tests' clients and oracle
    proxied: str  # bootstrap through Toxiproxy: what groupwarden is given
    proxy: Proxy
    env: dict[str, str]


@contextmanager
def proxied_broker(
    directory: Path, toxiproxy: ToxiproxyServer, name: str = "kafka"
) -> Iterator[ProxiedBroker]:
    port, bound = free_port(), free_port()
    proxy = toxiproxy.proxy(name, f"127.0.0.1:{bound}")
    env = private_broker_env(
        directory,
        port,
        KAFKA_PROXIED_PORT=str(bound),
        KAFKA_PROXIED_ADVERTISED_PORT=str(proxy.listen_port),
    )
    broker = ProxiedBroker(f"127.0.0.1:{port}", proxy.address, proxy, env)
    broker.up()
    try:
        yield broker
    finally:
        purge_private_kafka(env)
