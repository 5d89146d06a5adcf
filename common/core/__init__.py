"""The core layer: the walk itself and its privacy (docs/ARCHITECTURE.md, "Layers").

The flat modules here (accounting, calibration, truncation, privacy events,
validation, errors, plugins, the Skellam numerics of secure aggregation) import nothing but
each other; above them, the public plugin packages ``ldpem.common.models`` and
``ldpem.common.mechanisms``, and above those ``ldpem.common.protocol``. None of them
imports pydantic, does I/O or imports another layer of ``common/`` (tests/test_layers.py).
"""
