"""A model with an option of its own name and a β larger than d, defined in one file of its
own (tests/examples/phenotypes.py), takes the federated path (docs/EXTENDING.md, "A model
with its own parameters").

``pheno`` is gmmk's mixture under another option, ``--clusters``, loaded by the
coordinator and the agent processes through ``LDPEM_PLUGINS``. Its options travel through
the run request, the public parameters and each agent's command line (the ``--clusters``
flag is generated from the declaration, and an agent without it would pin the default,
K = 2, and refuse the run), and β of K·(d + 1) values is checked and calibrated as such,
with no product module edited: if one kept a list of option names, or sized β by d, this
test would fail.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ldpem.common.models import get_model
from ldpem.processes import Processes
from tests.fedkit import (
    agents_to_the_end,
    plugin_env,
    post_run,
    split_into_files,
    start_ticking_coordinator,
)

PLUGIN_ENV = plugin_env("tests.examples.phenotypes")
D, N, K = 3, 1200, 3


def test_a_federated_run_of_a_plugins_options_with_two_agent_processes(tmp_path: Path) -> None:
    # The plugin's records are gmmk's (the same generator), drawn in this process.
    records, _ = get_model("gmmk", {"components": K}).generate(N, D, rng=np.random.default_rng(7))
    paths = split_into_files(tmp_path, records.x, [N // 2] * 2)
    processes = Processes(tmp_path, env=PLUGIN_ENV)
    try:
        url = start_ticking_coordinator(processes, tmp_path)
        created = post_run(
            url,
            [N // 2] * 2,
            model="pheno",
            model_options={"clusters": K},
            d=D,
            sigma=1.0,
            rounds=2,
            forecast=False,
        )
        assert created["params"]["model_options"] == {"clusters": K}
        run = agents_to_the_end(
            processes,
            url,
            created["run_id"],
            paths,
            model="pheno",
            state=tmp_path,
            flags=("--clusters", str(K)),
        )
    finally:
        processes.stop()
    assert run["status"] == "finished", run
    assert run["model_options"] == {"clusters": K}
    assert len(run["beta"]) == K * (D + 1)
