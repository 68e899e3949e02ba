"""Toxiproxy for fault-injection tests: a real TCP proxy, driven through its HTTP API.

`devstack/toxiproxy.sh path` builds toxiproxy-server once (Go module proxy, cached under
~/.cache/groupwarden); each test module starts its own server on a free loopback port. Toxics
(docs/fault-injection.md): latency, bandwidth, limit_data (close after N bytes), reset_peer,
timeout; a proxy can also be disabled (every connection cut, new ones refused) and enabled again.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gwtest.env import REPO
from gwtest.ports import free_port
from gwtest.wait import wait_for


def toxiproxy_binary() -> str:
    script = str(REPO / "devstack" / "toxiproxy.sh")
    done = subprocess.run([script, "path"], capture_output=True, text=True, timeout=900, check=True)
    return done.stdout.strip()


@dataclass
class Proxy:
    server: ToxiproxyServer
    name: str
    listen_port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.listen_port}"

    def add_toxic(self, name: str, kind: str, stream: str = "downstream", **attributes: int) -> None:
        """stream: downstream = towards the client (answers), upstream = towards the server."""
        body = {"name": name, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attributes}
        self.server.call("POST", f"/proxies/{self.name}/toxics", body)

    def remove_toxic(self, name: str) -> None:
        self.server.call("DELETE", f"/proxies/{self.name}/toxics/{name}")

    @contextmanager
    def toxic(self, name: str, kind: str, stream: str = "downstream", **attributes: int) -> Iterator[None]:
        self.add_toxic(name, kind, stream, **attributes)
        try:
            yield
        finally:
            self.remove_toxic(name)

    def enabled(self, on: bool) -> None:
        """Disabled: existing connections are closed and new ones refused (an outage)."""
        self.server.call("POST", f"/proxies/{self.name}", {"enabled": on})


class ToxiproxyServer:
    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}"
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [toxiproxy_binary(), "-host", "127.0.0.1", "-port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_for(self._up, timeout=30, what="toxiproxy-server to answer")

    def _up(self) -> bool:
        try:
            self.call("GET", "/version")
            return True
        except OSError:  # URLError while the server starts
            return False

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.api + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
        return json.loads(text) if text.strip().startswith(("{", "[")) else text

    def proxy(self, name: str, upstream: str, listen_port: int | None = None) -> Proxy:
        port = listen_port or free_port()
        body = {"name": name, "listen": f"127.0.0.1:{port}", "upstream": upstream, "enabled": True}
        self.call("POST", "/proxies", body)
        return Proxy(self, name, port)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@contextmanager
def toxiproxy_server(log_path: Path) -> Iterator[ToxiproxyServer]:
    server = ToxiproxyServer(log_path)
    try:
        yield server
    finally:
        server.stop()
