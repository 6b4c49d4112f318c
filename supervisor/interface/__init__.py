"""The product layer: how people, programs and agents reach a desktop.

- :mod:`~supervisor.interface.client` — ``Client``, the Python API over the control socket;
  :mod:`~supervisor.interface.cli` — ``aotui``, with :mod:`~supervisor.interface.reports` (tables),
  :mod:`~supervisor.interface.watch` and :mod:`~supervisor.interface.demo`.
- :mod:`~supervisor.interface.launch` — ``launch_desktop``: start a supervisor process and wait
  until it answers (``up --detach``, the demo, the chaos runner, benchmarks and tests use it).

- :mod:`~supervisor.interface.serve` — ``serve_desktop``: a supervisor with these faces attached
  (what ``aotui up`` runs).
- :mod:`~supervisor.interface.jsonrpc` — JSON-RPC 2.0 framing, method schemas, error mapping;
  :mod:`~supervisor.interface.rpc_server` — ``RpcServer``, the ``rpc.sock`` socket served on the
  supervisor's event loop, bounded per peer; :mod:`~supervisor.interface.rpc_connection` — one
  peer (``SO_PEERCRED``) and ``ConnectionBook``, its budgets per process and idle timeout.
- :mod:`~supervisor.interface.rpc_client` — the CLI's one-call client of ``rpc.sock``.
- :mod:`~supervisor.interface.snapshot_json` — a snapshot as structured data.
- :mod:`~supervisor.interface.waits` — ``wait_for``: until a signal, a text, or quiet; budgeted
  per client.
- :mod:`~supervisor.interface.state_transfer` — ``export`` / ``import`` of a desktop's state;
  :mod:`~supervisor.interface.plain_data` — what such a state may hold, checked without recursion.
- :mod:`~supervisor.interface.mcp_server` — ``aotui mcp`` (stdio), on the official MCP SDK,
  imported by that command only; :mod:`~supervisor.interface.mcp_http` — the same over
  streamable HTTP, behind a bearer token and Host/Origin checks;
  :mod:`~supervisor.interface.mcp_tools` — its fixed tools;
  :mod:`~supervisor.interface.operation_tools` — its per-operation tools.

Arrows point one way: these modules use the
supervisor; nothing in the supervisor imports them.
"""

__all__: list[str] = []
