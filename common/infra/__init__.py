"""Infrastructure beside the core: log formats and SQLite connections (docs/ARCHITECTURE.md).

These modules import nothing from the rest of ``ldpem``; the layers above may use them,
the core may not (it does no I/O).
"""
