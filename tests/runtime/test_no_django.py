import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CODE = """
import importlib, pkgutil, sys
import agentweb.runtime
for info in pkgutil.iter_modules(agentweb.runtime.__path__):
    importlib.import_module("agentweb.runtime." + info.name)
bad = sorted(m for m in sys.modules if m == "django" or m.startswith("django.")
             or m.startswith("django_") or m.startswith("channels") or m.startswith("celery"))
print(",".join(bad))
"""


def test_it_imports_no_django():
    out = subprocess.run(
        [sys.executable, "-c", CODE], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "", f"runtime imported: {out.stdout.strip()}"


def test_it_has_no_django_import_statements():
    offenders = [
        p.name
        for p in (ROOT / "agentweb" / "runtime").glob("*.py")
        if "import django" in p.read_text() or "from django" in p.read_text()
    ]
    assert offenders == []
