"""The workbench: general tools for an agent, safe by construction (README, General tools).

Enable it next to the ticket tools with ``AGENTWEB_TOOLS=tools.ticket,tools.workbench``.

- ``run_python(code)`` (medium risk): Python in a bubblewrap sandbox — no network,
  read-only system folders, the run's workspace as the only writable place, CPU, memory,
  wall-clock and output limits; refused where isolation is unavailable.
- ``list_files(path)``, ``read_file(path)`` (low), ``write_file(path, content)``
  (medium): the run's workspace under ``AGENTWEB_DATA_DIR``; ``..``, absolute paths and
  links out of it are refused; beat deletes workspaces unused for
  ``AGENTWEB_WORKSPACE_RETENTION_DAYS`` (a housekeeping job registered here).
- ``http_get(url)``, ``browse(url)`` (low): public addresses only (the address guard,
  ``AGENTWEB_HTTP_ALLOW`` for exceptions); ``browse`` returns the page text and a
  screenshot the model sees.
"""

from agentweb.runs.hooks import on_housekeeping

from .files import list_files, read_file, write_file
from .python import run_python
from .web import browse, http_get
from .workspace import cleanup

# Beat's housekeeping deletes the workspaces unused for AGENTWEB_WORKSPACE_RETENTION_DAYS.
on_housekeeping("workspaces", lambda: len(cleanup()))

__all__ = ["browse", "http_get", "list_files", "read_file", "run_python", "write_file"]
