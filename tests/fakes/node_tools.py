"""Protocol peers from the npm registry that tests start for real (an OpenID provider, MCP
reference servers). Each package is installed once, at the version pinned here, into
``var/test-tools/<name>/`` of the checkout (ignored by git), and reused by later runs.
``.ci/run`` installs them before the suite (``python -m tests.fakes.node_tools``), so a
test does not pay for the download; a test that finds no ``npm`` skips with the reason.

    root = ensure("oidc-provider")      # -> .../var/test-tools/oidc-provider
    node_modules = root / "node_modules"
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = ROOT / "var" / "test-tools"

# name -> exact version (npm registry); bump deliberately, one at a time.
PINNED: dict[str, str] = {
    "oidc-provider": "9.13.3",
    "@modelcontextprotocol/server-everything": "2026.8.31",
}


class Unavailable(RuntimeError):
    """npm is missing or the install failed; the message says which."""


def _folder(name: str) -> Path:
    return TOOLS_DIR / name.replace("@", "").replace("/", "__")


def ensure(name: str) -> Path:
    """Install ``name`` at its pinned version when it is not there yet; return its folder
    (``<folder>/node_modules/<name>`` holds the package). Safe from parallel processes."""
    version = PINNED[name]
    folder = _folder(name)
    stamp = folder / f".installed-{version}"
    if stamp.exists():
        return folder
    npm = shutil.which("npm")
    if npm is None:
        raise Unavailable("npm is not installed (the test tools come from the npm registry)")
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists():
            return folder
        (folder / "package.json").write_text('{"private": true}\n')
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", f"{name}@{version}"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise Unavailable(f"npm install {name}@{version} failed: {done.stderr.strip()[-500:]}")
        for old in folder.glob(".installed-*"):
            old.unlink()
        stamp.touch()
    return folder


def main() -> int:
    for name in PINNED:
        try:
            print(f"{name}: {ensure(name)}")
        except Unavailable as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
