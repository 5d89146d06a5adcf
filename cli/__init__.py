"""ldpem: federated gradient EM under local differential privacy.

Subpackages: ``ldpem.common`` (numerical core), ``ldpem.server`` (coordinator),
``ldpem.client`` (hospital agent). This package holds the ``ldpem`` command.
"""

from __future__ import annotations

__version__ = "0.1.0"
