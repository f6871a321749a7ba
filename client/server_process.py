"""Run a local `envad serve` as a child process (for the demo and for jobs that need a
throw-away server): start it, wait until it serves, always stop it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from envad.client.library import EnvadClient
from envad.defaults import SERVICE_NAME
from envad.errors import Unavailable

READY_LINE = "envad serving on "


class LocalServer:
    """`with LocalServer(data_dir, models_dir) as server:` -> server.address is HOST:PORT.

    The server's output goes to `log_path` (and its last lines are kept for errors).
    """

    def __init__(
        self,
        data_dir: str | Path,
        models_dir: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_path: str | Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.models_dir = Path(models_dir)
        self.host = host
        self.port = port
        self.log_path = Path(log_path) if log_path else None
        self.env = env or {}
        self.process: subprocess.Popen | None = None
        self.tail: deque[str] = deque(maxlen=60)
        self._pump: threading.Thread | None = None
        self._listening = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        """The process to run: `envad serve` with this server's address and directories."""
        return [sys.executable, "-m", "envad.client.cli", *self.serve_args()]

    def serve_args(self) -> list[str]:
        return ["serve", "--host", self.host, "--port", str(self.port),
                "--data-dir", str(self.data_dir), "--models-dir", str(self.models_dir)]

    def start(self, timeout: float = 120.0, wait_service: bool = True) -> LocalServer:
        """Start the process; return once it listens (and, by default, once the scoring
        service reports SERVING, i.e. an encoder is loaded)."""
        self._listening = False
        env = {**os.environ, "ENVAD_LOG_FORMAT": "text", **self.env}
        self.process = subprocess.Popen(self.command(), stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, env=env,
                                        bufsize=1)
        log = self.log_path.open("a") if self.log_path else None
        self._pump = threading.Thread(target=self._read_output, args=(log,), daemon=True)
        self._pump.start()
        deadline = time.monotonic() + timeout
        while not self._listening:
            if self.process.poll() is not None:
                raise Unavailable(f"envad serve exited with code {self.process.returncode}:\n"
                                  + "".join(self.tail))
            if time.monotonic() > deadline:
                self.stop()
                raise Unavailable("envad serve did not start in time:\n" + "".join(self.tail))
            time.sleep(0.05)
        if wait_service:
            with EnvadClient(self.address) as client:
                client.wait_until_serving(max(1.0, deadline - time.monotonic()), SERVICE_NAME)
        return self

    def _read_output(self, log) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.tail.append(line)
            if log is not None:
                log.write(line)
                log.flush()
            if not self._listening and line.startswith(READY_LINE):
                self.port = int(line.strip().rsplit(":", 1)[1])
                self._listening = True
        if log is not None:
            log.close()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (the server drains in-flight calls), then SIGKILL after `timeout`."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.terminate()
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if self._pump is not None:
            self._pump.join(5)
        return code

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
