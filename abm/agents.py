"""Mesa agents: thin views over the model's numpy columns.

Per-applicant state lives in columns owned by the family's world (``model.world.cols``);
an ``Applicant`` only holds its row number, so creating or keeping agents costs nothing on
the hot path. Agents know their model only as a ``mesa.Model`` with ``world`` and ``log``
attributes (the engine, ``abm.engine.Simulation``, imports this module, not the other way round).
Applicant agents are materialised lazily, the first time an applicant acts or
when asked for with ``model.applicant(i)``; ``model.agents_by_type[Applicant]`` therefore
holds every applicant who has interacted with the bank.
"""

from __future__ import annotations

from typing import Any

import mesa


class Applicant(mesa.Agent):
    """One applicant: a view on row ``agent_id`` of the world's columns."""

    def __init__(self, model: mesa.Model, agent_id: int):
        super().__init__(model)
        self.agent_id = int(agent_id)

    def __getattr__(self, name: str) -> Any:
        cols = self.__dict__.get("model").world.cols if "model" in self.__dict__ else None
        if cols is not None and name in cols:
            value = cols[name][self.agent_id]
            return value.item() if hasattr(value, "item") else value
        raise AttributeError(name)

    @property
    def group_name(self) -> str:
        return self.model.world.group_names[int(self.model.world.cols["group"][self.agent_id])]

    def history(self):
        """This applicant's events so far (a pandas DataFrame)."""
        frame = self.model.log.to_frame()
        return frame[frame["agent_id"] == self.agent_id].reset_index(drop=True)

    def __repr__(self) -> str:
        return f"Applicant({self.agent_id}, group={self.group_name})"


class Group(mesa.Agent):
    """A demographic group: its index, name and the slice of rows its members occupy."""

    def __init__(self, model: mesa.Model, index: int, name: str, start: int, stop: int):
        super().__init__(model)
        self.index, self.name, self.start, self.stop = index, name, start, stop

    @property
    def size(self) -> int:
        return self.stop - self.start

    def __repr__(self) -> str:
        return f"Group({self.index}, {self.name!r}, n={self.size})"


class Bank(mesa.Agent):
    """The lender. Its decision module is ``model.policy``; the review loop is in the engine."""

    def __init__(self, model: mesa.Model):
        super().__init__(model)
        self.queue: list[int] = []
        self.profit = 0.0
