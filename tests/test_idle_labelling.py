"""Idle time labelled by one sweep of a group's contexts (rlsim.sim.idle_labels._ContextSweep) gives the same pieces as
the definition: each gap cut at every context boundary inside it, each piece the label of the latest-recorded context
covering its midpoint — checked against that definition written out directly, on random contexts and gaps."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsim.events import Span
from rlsim.sim.idle_labels import _ContextSweep

TIMES = st.integers(min_value=0, max_value=40).map(lambda t: t / 4)


def by_definition(gpu: int, start: float, end: float, contexts: list[tuple[int, Span]]) -> list[tuple]:
    cuts = {start, end} | {t for _, c in contexts for t in (c.start, c.end) if start < t < end}
    edges = sorted(cuts)
    pieces = []
    for a, b in zip(edges, edges[1:], strict=False):
        mid = (a + b) / 2
        covering = [(order, c) for order, c in contexts if c.start <= mid < c.end]
        label = max(covering, key=lambda oc: oc[0])[1].label if covering else "unassigned"
        pieces.append((a, b, label))
    return pieces


@st.composite
def contexts_and_gaps(draw):
    contexts = []
    for order in range(draw(st.integers(min_value=0, max_value=12))):
        a, b = sorted((draw(TIMES), draw(TIMES)))
        if b > a:
            label = draw(st.sampled_from(["tail", "starved", "barrier", "staleness_block"]))
            contexts.append((order, Span(0, 1, a, b, label, "", 0, 0)))
    edges = sorted(set(draw(st.lists(TIMES, min_size=2, max_size=10))))
    gaps = [(a, b) for a, b in zip(edges[::2], edges[1::2], strict=False) if b > a]
    return contexts, gaps


@settings(max_examples=300, deadline=None)
@given(contexts_and_gaps())
def test_the_sweep_labels_every_gap_as_the_definition_does(case):
    contexts, gaps = case
    sweep = _ContextSweep(contexts)
    # The gaps come in time order, as a GPU's do, and are labelled all at once.
    starts = np.array([start for start, _ in gaps], dtype=np.float64)
    ends = np.array([end for _, end in gaps], dtype=np.float64)
    piece_starts, piece_ends, owners = sweep.pieces(starts, ends)
    labels = {order: context.label for order, context in contexts}
    swept = [(a, b, labels[order] if order >= 0 else "unassigned")
             for a, b, order in zip(piece_starts.tolist(), piece_ends.tolist(), owners.tolist(), strict=True)]
    assert swept == [piece for start, end in gaps for piece in by_definition(0, start, end, contexts)]
