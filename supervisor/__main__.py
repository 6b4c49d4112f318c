"""``python -m supervisor`` is the ``aotui`` command."""

import sys

from supervisor.cli import main

sys.exit(main())
