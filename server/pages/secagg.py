"""The run page's view of a secure-aggregation run: who took part in each step of each
round, the survivors, who was lost at which step and how each step closed
(``ldpem.server.secagg.view``), and the cells the round table shows for such a round."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from ldpem.common.core.naming import natural_key, natural_sorted
from ldpem.common.secagg.steps import HOLDER_STEPS, Step
from ldpem.server.health import RoundView
from ldpem.server.pages.kit import escape
from ldpem.server.secagg.view import STEP_WORDS, SecAggRound

__all__ = ["round_cells", "steps_table"]

#: Rounds listed at most (the latest), as in the round table.
MAX_ROUNDS = 30
#: The column of each holder step.
_HEADINGS = {
    Step.ADVERTISE: "advertised",
    Step.SHARES: "shared keys",
    Step.MASKED: "masked",
    Step.SIGNATURE: "signed S",
    Step.UNMASK: "unmasked",
}


def _who(names: Collection[str], enrolled: Sequence[str]) -> str:
    """``names`` against the enrolled holders: "all 5", or "4, without h3"."""
    if not names:
        return "none"
    if set(names) >= set(enrolled):
        return f"all {len(enrolled)}"
    without = [n for n in enrolled if n not in names]
    return f"{len(names)}, without {', '.join(without)}"


def _by_name(named: Mapping[str, str]) -> list[tuple[str, str]]:
    """``named``'s items in the order hospitals are listed to people (h2 before h10)."""
    return sorted(named.items(), key=lambda item: natural_key(item[0]))


def _lost(view: SecAggRound) -> str:
    """Who this round lost (and at which step), did not wait for, or got back."""
    lost = [f"{name} (did not {STEP_WORDS[step]})" for name, step in _by_name(view.lost)]
    lost += [f"{name} (left out of S by a peer)" for name in natural_sorted(view.excluded)]
    lost += [f"{name} (left out of S: {why})" for name, why in _by_name(view.disputed)]
    parts = [f"lost: {', '.join(lost)}"] if lost else []
    if view.lost_round is not None:
        named = ", ".join(natural_sorted(view.lost_round["culprits"]))
        parts.insert(
            0,
            f"round lost, {view.lost_round['cause']}"
            + (f" ({named})" if named else "")
            + f": {view.lost_round['reason']}",
        )
    if view.not_waited:
        parts.append(f"not waited for: {', '.join(view.not_waited)}")
    if view.returned:
        parts.append(f"came back: {', '.join(view.returned)}")
    return "; ".join(parts)


def _closings(view: SecAggRound) -> str:
    late = [c for c in view.closings if c.by == "deadline"]
    if not view.closings:
        return "—"
    if not late:
        return f"{len(view.closings)} of {len(HOLDER_STEPS)} on answers"
    return "; ".join(
        f"{c.step} at its deadline" + (f" without {', '.join(c.missing)}" if c.missing else "")
        for c in late
    )


def steps_table(
    rounds: Sequence[RoundView], enrolled: Sequence[str], *, t_min: int, colluders: int
) -> str:
    """The latest rounds, newest first, one column per step."""
    rows = []
    for r in reversed([r for r in rounds if r.secagg is not None][-MAX_ROUNDS:]):
        view = r.secagg
        assert view is not None
        cells = []
        for step in HOLDER_STEPS:
            reached = view.step == Step.DONE or HOLDER_STEPS.index(step) <= _index(view.step)
            cells.append(escape(_who(view.answered.get(step, ()), enrolled)) if reached else "—")
        survivors = "—" if view.survivors is None else escape(_who(view.survivors, enrolled))
        lost = _lost(view)
        rows.append(
            f'<tr class="{"lost" if lost else ""}"><td class="num">{r.t}</td>'
            f"<td>{escape(view.step)}</td>"
            + "".join(f"<td>{c}</td>" for c in cells)
            + f"<td>{survivors}</td>"
            + f'<td class="{"missing" if lost else ""}">{escape(lost) or "—"}</td>'
            + f"<td>{escape(_closings(view))}</td></tr>"
        )
    note = (
        f"Each round's sum needs at least t_min = {t_min} holders through every step (a "
        f"collusion bound of c = {colluders}: the noise is sized for t_min − c honest "
        "holders). S is the survivor set the holders signed (the consistency step); the "
        "survivors are the holders whose inputs are in the sum. A step closes when every "
        "holder it waits for answered, or at its deadline; a holder that did not answer is "
        "lost, and later rounds do not wait for it until it advertises again."
    )
    headings = "".join(f"<th>{h}</th>" for h in _HEADINGS.values())
    return (
        '<table id="secagg"><tr><th>t</th><th>step</th>'
        f"{headings}<th>survivors</th><th>lost</th><th>steps closed</th></tr>"
        f'{"".join(rows)}</table><p class="note">{escape(note)}</p>'
    )


def _index(step: str) -> int:
    return HOLDER_STEPS.index(step) if step in HOLDER_STEPS else len(HOLDER_STEPS)


def round_cells(r: RoundView, enrolled: Sequence[str], t_min: int) -> tuple[str, str, str]:
    """A secagg round's cells in the round table: its count of survivors (or of holders
    that answered the open step), who took part, who was lost ("" when nobody) (HTML,
    escaped)."""
    view = r.secagg
    assert view is not None
    if view.survivors is not None:
        count = f"{len(view.survivors)}/{len(enrolled)} survivors (t_min {t_min})"
        took = f"sum of {', '.join(view.survivors)}"
    else:
        answered = view.answered.get(view.step, ())
        count = f"{len(answered)}/{len(enrolled)} (t_min {t_min})"
        took = f"{view.step} step open: {', '.join(answered) or 'no answer yet'}"
    lost = _lost(view)
    return (
        escape(count),
        escape(took),
        f'<span class="missing">{escape(lost)}</span>' if lost else "",
    )
