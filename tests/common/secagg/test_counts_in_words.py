"""A count of one holder is "1 holder", not "1 holders" (issue 43, finding 12), in the
aggregator's and the holder's refusals."""

from __future__ import annotations

import pytest

from ldpem.common.secagg import Aggregator, SecAggError
from tests.common.secagg.kit import Consortium


@pytest.mark.parametrize(("advertised", "words"), [(1, "1 holder advertised"), (2, "2 holders")])
def test_too_few_holders_are_counted_in_words(advertised: int, words: str) -> None:
    consortium = Consortium.of(5)
    parameters = consortium.parameters()
    holders = consortium.holders(parameters)
    aggregator = Aggregator(consortium.roster, parameters, dimension=3)
    for name in list(holders)[:advertised]:
        aggregator.receive_advertisement(holders[name].advertise())
    with pytest.raises(SecAggError) as refused:
        aggregator.participants()
    assert str(refused.value).startswith(f"only {words} "), str(refused.value)
