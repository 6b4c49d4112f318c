"""``python -m supervisor`` is the ``aotui`` command."""

import sys

from aotui.supervisor.interface.cli import main

sys.exit(main())
