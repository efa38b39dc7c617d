"""docs/runtime.md shows the runtime used alone; run its example so it stays true."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_example_runs_without_django():
    text = (ROOT / "docs" / "runtime.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "no python example in docs/runtime.md"
    code = blocks[0] + (
        "\nimport sys\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'django'], 'django imported'\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("run_started")
    assert any(line.startswith("approval_requested") for line in lines)
    assert lines[-1].startswith("Finished(answer='I refunded 42.00 EUR for order A1001.'")
