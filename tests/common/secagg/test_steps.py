"""The one vocabulary of a round's steps (``common/secagg/steps.py``): its values are the
wire's path segments and stored kinds, so they are pinned here."""

from __future__ import annotations

from ldpem.common.secagg.steps import ANSWERS, HOLDER_STEPS, Step


def test_the_steps_are_the_wire_names_in_the_rounds_order() -> None:
    assert [step.value for step in Step] == [
        "advertise",
        "shares",
        "masked",
        "signature",
        "unmask",
        "done",
    ]
    assert [step.order for step in Step] == list(range(len(Step)))
    assert Step.MASKED.order > Step.SHARES.order


def test_a_holder_posts_in_every_step_but_done_and_fetches_an_answer_to_all_but_unmask() -> None:
    assert tuple(step for step in Step if step is not Step.DONE) == HOLDER_STEPS
    assert list(ANSWERS) == [Step.ADVERTISE, Step.SHARES, Step.MASKED, Step.SIGNATURE]
    assert list(ANSWERS.values()) == [
        "participants",
        "bundle",
        "consistency-check",
        "unmask-request",
    ]


def test_a_step_reads_from_and_compares_with_its_stored_string() -> None:
    stored: str = "masked"
    assert Step(stored) is Step.MASKED
    assert stored == Step.MASKED and f"{Step.SHARES}:h1" == "shares:h1"
    table: dict[str, int] = {Step.UNMASK: 1}
    assert table["unmask"] == 1
