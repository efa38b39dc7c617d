#!/usr/bin/env python
"""Django's command-line utility for agentweb."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentweb.settings")
    # Beside a running `make run` of this checkout: its database, Redis and DEBUG.
    from agentweb.devstack import load_running_env

    load_running_env()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
