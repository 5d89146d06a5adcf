"""A model with an option of its own name and a β larger than d, in one file
(docs/EXTENDING.md, "A model with its own parameters"): gmmk's K-component Gaussian
mixture, its K declared as ``clusters`` (2 to 4, default 2). Loaded through
``LDPEM_PLUGINS`` by tests/test_extension_options.py, never imported by the test process
(so that the other tests' lists of registered models and options do not see it).
"""

from __future__ import annotations

from typing import ClassVar

from ldpem.common.models import ModelOption, register_model
from ldpem.common.models.gmmk import GaussianMixtureK


class Phenotypes(GaussianMixtureK):
    """gmmk with its K declared as ``clusters``."""

    name: ClassVar[str] = "pheno"
    options = (ModelOption("clusters", default=2, low=2, high=4, help="phenotypes K"),)

    def __init__(self, clusters: int = 2) -> None:
        super().__init__(components=clusters)
        self.clusters = clusters


register_model(Phenotypes())
