"""The coordinator of a federated run (FastAPI): ``app.create_app(settings)``.

``coordinator`` is the round state machine, ``store`` its SQLite persistence, ``forecast``
the accuracy stated at run creation, ``routes`` the HTTP API (``/v1``), ``settings`` its
configuration. See docs/FEDERATED.md.
"""
