"""A tiny Chrome DevTools Protocol client over ``--remote-debugging-pipe`` (no extra dependency).

Chromium reads NUL-terminated JSON messages on fd 3 and writes its answers and events on fd 4. Used by
the browser tests to load a report, collect console errors, exceptions and network requests, evaluate
expressions and take screenshots.
"""
from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from typing_extensions import Self

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


def find_chromium() -> str | None:
    """The Chromium binary (Debian's real binary first: its /usr/bin launcher is a shell script)."""
    if os.access("/usr/lib/chromium/chromium", os.X_OK):
        return "/usr/lib/chromium/chromium"
    for name in ("chromium", "chromium-browser", "google-chrome", "headless_shell"):
        path = shutil.which(name)
        if path:
            return path
    return None


class CdpError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page attached (flat session)."""

    def __init__(self, binary: str, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="report-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire() -> None:  # runs in the child: fd 3 = commands in, fd 4 = messages out
            a, b = os.dup(to_child_r), os.dup(from_child_w)  # out of the way of 3 and 4 first
            os.dup2(a, 3)
            os.dup2(b, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        self._stderr = open(Path(self._profile.name) / "stderr.log", "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self._profile.name}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
            preexec_fn=wire, close_fds=False,  # noqa: PLW1509 - fds 3/4 must be wired before exec
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)

    # -- protocol ------------------------------------------------------------------------------------
    def _send(self, msg: dict[str, Any]) -> None:
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError("timed out waiting for Chromium")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise CdpError("Chromium closed the pipe")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict[str, Any] | None = None, *, session: bool = False) -> dict[str, Any]:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        self._send(msg)
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_event(self, *methods: str, timeout: float | None = None) -> dict[str, Any]:
        """The first event (already queued or coming) whose method is one of ``methods``."""
        for i, ev in enumerate(self.events):
            if ev.get("method") in methods:
                return self.events.pop(i)
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            msg = self._read(deadline)
            if msg.get("method") in methods:
                return msg
            if "method" in msg:
                self.events.append(msg)

    # -- helpers -------------------------------------------------------------------------------------
    def navigate(self, url: str, width: int = 1280, height: int = 900) -> None:
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=True)
        self.events.clear()
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait_event("Page.loadEventFired", "Page.navigatedWithinDocument")
        time.sleep(0.2)
        self.evaluate("1")  # drain events queued by the load

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True)
        if "exceptionDetails" in result:
            raise CdpError(f"evaluate failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def problems(self) -> list[str]:
        """Console errors/warnings, uncaught exceptions and log errors seen since the last navigation."""
        out = []
        for ev in self.events:
            method, params = ev.get("method"), ev.get("params", {})
            if method == "Runtime.exceptionThrown":
                out.append(f"exception: {params.get('exceptionDetails', {}).get('text')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{params.get('type')}: {params.get('args')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
                out.append(f"log: {params['entry'].get('text')}")
        return out

    def requests(self) -> list[str]:
        """URLs the page requested since the last navigation."""
        return [ev["params"]["request"]["url"] for ev in self.events
                if ev.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, path: Path, width: int = 1280, max_height: int = 16000) -> None:
        """A PNG of the page from the top, at most ``max_height`` pixels tall."""
        height = min(int(self.evaluate("document.documentElement.scrollHeight")), max_height)
        data = self.call("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        }, session=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (CdpError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        self._profile.cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
