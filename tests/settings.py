"""Test settings: the project's settings with development defaults for what CI leaves unset."""

import os

os.environ.setdefault("DEBUG", "1")

from django.conf import global_settings  # noqa: E402

from agentweb.settings import *  # noqa: E402, F403

# Tests create thousands of users; PBKDF2 (a million rounds each) was most of the time of
# tests/runs. The first hasher hashes, the rest still check a password stored with them.
# The live stack's processes inherit this module, so they check these passwords too.
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
    *global_settings.PASSWORD_HASHERS,
]
