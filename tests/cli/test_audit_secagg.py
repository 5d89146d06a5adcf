"""``ldpem audit --mechanism secagg``: the release of t_min holders' summed shares passes,
and a mechanism with too little noise is caught (planted mutations)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from ldpem.cli import main
from ldpem.commands.audit import run_audit
from ldpem.common.mechanisms import SecAggSkellam
from tests.cli.test_cmd_audit import SMALL as AUDIT_SMALL

#: tests/cli/test_cmd_audit.py's SMALL audit (d = 1 for speed, 300 releases per input through
#: the holder's round: ±6% on the noise std, seeded) of secagg, t_min = 3.
SMALL: dict[str, Any] = {**AUDIT_SMALL, "mechanisms": ("secagg",), "t_min": 3}


def test_the_honest_mechanism_passes(capsys: pytest.CaptureFixture[str]) -> None:
    rows = run_audit(**SMALL)
    assert {(r["built_by"], r["path"]) for r in rows} == {
        ("simulator", "mechanism"),
        ("simulator", "holder_round"),
    }
    assert all(r["passed"] for r in rows), rows
    holder = next(r for r in rows if r["path"] == "holder_round")
    # The Skellam calibration (Rényi DP) needs a few % more noise than the exact Gaussian.
    low, high = holder["noise_std_ratio"]
    assert high >= 1.0 and low <= 1.2
    argv = ["audit", "--mechanism", "secagg", "--accounting", "exact", "--d", "1", "--json"]
    code = main([*argv, "--draws", "2000", "--holder-draws", "200", "--t-min", "2"])
    assert code == 0 and json.loads(capsys.readouterr().out)["passed"] is True


def half_the_std(real: Callable[..., float]) -> Callable[..., float]:
    def planted(self: SecAggSkellam, d: int, **kwargs: Any) -> float:
        return 0.5 * real(self, d, **kwargs)

    return planted


def shares_for_twice_t_min(real: Callable[..., float]) -> Callable[..., float]:
    """Each share sized as if twice t_min honest holders were there: t_min shares then
    carry half the calibrated variance."""

    def planted(self: SecAggSkellam, d: int, **kwargs: Any) -> float:
        return real(self, d, **kwargs) / 2**0.5

    return planted


@pytest.mark.parametrize("mutation", [half_the_std, shares_for_twice_t_min])
def test_too_little_noise_fails_the_audit(
    monkeypatch: pytest.MonkeyPatch, mutation: Callable[[Callable[..., float]], Any]
) -> None:
    monkeypatch.setattr(SecAggSkellam, "shared_noise_std", mutation(SecAggSkellam.shared_noise_std))
    rows = run_audit(**SMALL)
    holder = next(r for r in rows if r["path"] == "holder_round")
    assert holder["passed"] is False, holder
    assert holder["noise_std_ratio"][1] < 0.98
