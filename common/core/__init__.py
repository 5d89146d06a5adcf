"""The core layer: the walk itself and its privacy (docs/ARCHITECTURE.md, "Layers").

The flat modules here (accounting, calibration, truncation, privacy events,
validation, errors, plugins, the Skellam numerics of secure aggregation) and the public
plugin packages ``ldpem.common.models``, ``ldpem.common.mechanisms`` and
``ldpem.common.protocol`` import nothing but each other: no pydantic, no I/O, no other
layer of ``common/`` (tests/test_layers.py).
"""
