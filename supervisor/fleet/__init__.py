"""The fleet: many desktops across machines, as detached named Ray actors (``aotui fleet``).

Each desktop is one actor that owns one supervisor on its node, started as ``aotui up`` starts
one, its state in a PostgreSQL store; the router actor creates and finds them by name. Ray is
imported only by the fleet's own modules (the ``fleet`` extra): ``docs/fleet.md``.
"""
