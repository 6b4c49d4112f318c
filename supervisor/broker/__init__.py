"""Brokered HTTP: requests the supervisor performs for apps under their ``net:http`` grants.

- :mod:`~supervisor.broker.http` — ``HttpBroker``, ``HttpRequest``, ``HttpResponse``: the checks
  and the request, on the broker's own bounded pool.
- :mod:`~supervisor.broker.net_policy` — which hosts and addresses a grant reaches.
"""

__all__: list[str] = []
