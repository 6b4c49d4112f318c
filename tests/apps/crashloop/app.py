"""Exits with status 5 the moment it is loaded (crash-loop tests)."""

import os

os._exit(5)
