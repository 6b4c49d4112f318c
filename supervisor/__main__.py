"""``python -m supervisor`` is the ``aotui`` command."""

import sys

from aotui.supervisor.cli import main

sys.exit(main())
