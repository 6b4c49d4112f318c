"""``python -m aotui.supervisor`` is the ``aotui`` command."""

import sys

if sys.argv[1:2] == ["up"]:  # any other command imports nothing more for it
    from aotui.supervisor.workers import zygote_start

    if zygote_start.serves_here(sys.argv[1:]):
        # A desktop's supervisor (interface/launch.py starts every desktop this way): its zygote
        # before even the command line's imports (~40 ms of CPU), which its own start then
        # overlaps too. A start refused later exits us, and the zygote with us; run as the
        # ``aotui`` script, `up` starts it in cmd_up (a second call starts no second zygote).
        zygote_start.prestart()

from aotui.supervisor.interface.cli import main

sys.exit(main())
