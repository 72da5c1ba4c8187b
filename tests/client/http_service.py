"""The HTTP service as a real server process, for the tests of emem_client.http.

`ServiceProcess` runs a command (uvicorn with an app factory, or `emem serve`) on a free
loopback port, waits until it answers, and stops it afterwards. `app_for_tests` is the factory
the tests run under uvicorn: the real app, settings from the environment, and the tests'
deterministic gateway, switched off while the file EMEM_TEST_GATEWAY_SWITCH names exists.
"""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from clusters import free_port
from doubles import FileSwitchedGateway
from fastapi import FastAPI

from emem_client.http import create_app
from emem_client.service_settings import ServiceSettings

CLIENT_TESTS = Path(__file__).resolve().parent
# The factory imports this folder's helpers and those of tests/ (clusters).
TEST_PATH = os.pathsep.join([str(CLIENT_TESTS), str(CLIENT_TESTS.parent)])
START_SECONDS = 30


def app_for_tests() -> FastAPI:
    return create_app(
        ServiceSettings.from_environment(), FileSwitchedGateway(Path(os.environ["EMEM_TEST_GATEWAY_SWITCH"]))
    )


class ServiceProcess:
    """A server process on 127.0.0.1:`port`; `http` is a client for it (Host: 127.0.0.1:port)."""

    def __init__(self, command: list[str], env: dict[str, str], port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115  (lives as long as the process; closed in stop)
        self.process = subprocess.Popen(
            command,
            env={**os.environ, "PYTHONPATH": TEST_PATH, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.http = httpx.Client(base_url=self.url, timeout=30)

    @classmethod
    def uvicorn(
        cls, env: dict[str, str], factory: str = "http_service:app_for_tests", host: str = "127.0.0.1"
    ) -> "ServiceProcess":
        port = free_port()
        command = [sys.executable, "-m", "uvicorn", "--factory", factory, "--host", host, "--port", str(port)]
        return cls(command, env, port).started()

    def started(self) -> "ServiceProcess":
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the service exited with {self.process.returncode}:\n{self.output()}")
            try:
                self.http.get("/openapi.json", timeout=1)
                return self
            except httpx.TransportError:
                time.sleep(0.05)
        self.stop()
        raise AssertionError(f"the service did not answer within {START_SECONDS} s:\n{self.output()}")

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def stop(self) -> None:
        self.http.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def __enter__(self) -> "ServiceProcess":
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
