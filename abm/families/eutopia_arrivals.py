"""Eutopia's group arrival processes sampled in vectorised blocks (the fast, exact path).

With ``review: batch`` and excitation on approvals, nothing changes a group's application rate
between two state changes (decision epochs with approvals, loan resolutions, episode ends)
except the deterministic decay of its excitation, so the rate is non-increasing there and the
rate at the start is a valid Ogata bound for the whole stretch. Each group's SimPy process
therefore draws a *block* of candidate times at once (exponential gaps at the bound), thins it
and picks its applicant in the same vectorised pass (see ``_draw``): one SimPy event per
block instead of one per application.
Accepted arrivals wait in ``pending`` and are committed (logged with their own times, counted,
queued) by ``collect()``, which the world runs before anything reads or changes the state: at
each review and before each loan resolution. When the rate changes the world calls
``discard(g)``: the candidates after now are dropped and the process redraws from now
(exponential waits are memoryless, so this is exact). The scalar one-event-per-application
path in ``World._arrivals`` remains for ``review: immediate`` and excitation on applications,
where every application changes what happens next.
With social ties (``abm.families.network``) the network term is one more source with its own
slot (``add_source``), drawn in blocks the same way and committed with the groups' arrivals.
"""

from __future__ import annotations

import numpy as np
import simpy

from abm.hawkes import decay

BLOCK_MARGIN = 1.5  # candidates per block: this many times the expected count in one epoch ...
BLOCK_MIN = 8  # ... and never fewer than this
# ... nor more than this (a runaway rate must not allocate a huge block before the engine's
# application budget, episodes.max_applications, can stop it; any block size is exact)
BLOCK_MAX = 1 << 18


class BlockArrivals:
    """The pending, not yet committed, arrivals of one Eutopia world's groups."""

    def __init__(self, world):
        self.world = world
        self.env: simpy.Environment = world.env
        self.epoch = world.model.scenario.episodes.decision_interval
        self.pending_t: list[list[np.ndarray]] = [[], []]
        self.pending_i: list[list[np.ndarray]] = [[], []]

    def process(self, g: int):
        """The SimPy process of group g: draw a block, sleep to its last candidate, repeat."""
        w, env = self.world, self.env
        while True:
            try:
                bound = w.intensity(g) * w.max_weight
                if bound <= 0:
                    yield env.event()  # dormant until something changes the rate
                while True:
                    last = self._draw(g, bound)
                    yield env.timeout(last - env.now)
                    if sum(map(len, self.pending_i[g])) > w.model.applications_left():
                        self.collect()  # past the episode's budget: committing raises the engine's error
                    bound = w.intensity(g) * w.max_weight  # smaller now: the excitation decayed
            except simpy.Interrupt:
                w._wake[g] = False

    def _draw(self, g: int, bound: float) -> float:
        """Append one block of accepted arrivals for group g; return its last candidate time.

        Candidates come at rate ``bound = lambda_g(now) * max_weight`` (>= the group's rate
        until the next change), each names a uniformly drawn member i of the group and is kept
        with probability ``lambda_g(t) w_i / bound``: member i then applies at exactly
        ``lambda_g(t) w_i / N_g``. Thinning and the weighted choice happen in one pass.
        """
        w, now = self.world, self.env.now
        rng = w.arrival_rngs[g]
        start, stop = w.group_slices[g]
        k = min(BLOCK_MAX, max(BLOCK_MIN, int(BLOCK_MARGIN * bound * self.epoch) + 1))
        times = now + np.cumsum(rng.exponential(1.0 / bound, k))
        who = start + rng.integers(stop - start, size=k)
        # exact intensity at each candidate: constant base + decaying excitation
        intensity = w.base_rate(g) + decay(w.excitation[g], times - w.excitation_time[g], w.arr.decay)
        kept = rng.random(k) * bound <= intensity * w.cols["weight"][who]
        if kept.any():
            self.pending_t[g].append(times[kept])
            self.pending_i[g].append(who[kept])
        return float(times[-1])

    def add_source(self) -> int:
        """One more arrival source beside the two groups (the network term of
        ``abm.families.network``): its slot in ``pending_t``/``pending_i``, committed with theirs."""
        self.pending_t.append([])
        self.pending_i.append([])
        return len(self.pending_t) - 1

    def discard(self, g: int) -> None:
        """The rate of group g changes now: its candidates after now are void."""
        self.pending_t[g].clear()
        self.pending_i[g].clear()

    def collect(self) -> None:
        """Commit every pending arrival up to now, both groups merged in time order."""
        now = self.env.now
        pt = self.pending_t
        # most reviews find nothing due: blocks are appended in time order, so check the head
        if not ((pt[0] and pt[0][0][0] <= now) or (pt[1] and pt[1][0][0] <= now)
                or any(p and p[0][0] <= now for p in pt[2:])):
            return
        times, ids = [], []
        for g in range(len(pt)):
            if not self.pending_t[g]:
                continue
            t = np.concatenate(self.pending_t[g]) if len(self.pending_t[g]) > 1 else self.pending_t[g][0]
            i = np.concatenate(self.pending_i[g]) if len(self.pending_i[g]) > 1 else self.pending_i[g][0]
            due = int(t.searchsorted(now, side="right"))
            if due == 0:
                continue
            times.append(t[:due])
            ids.append(i[:due])
            self.pending_t[g] = [t[due:]] if due < len(t) else []
            self.pending_i[g] = [i[due:]] if due < len(t) else []
        if not times:
            return
        if len(times) > 1:
            t, i = np.concatenate(times), np.concatenate(ids)
            order = np.argsort(t, kind="stable")
            times, ids = t[order], i[order]
        else:
            times, ids = times[0], ids[0]
        self.world._commit_arrivals(times, ids)
