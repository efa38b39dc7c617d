"""Test settings: the project's settings with development defaults for what CI leaves unset."""

import os

os.environ.setdefault("DEBUG", "1")

from agentweb.settings import *  # noqa: E402, F403
