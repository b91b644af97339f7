"""The buffered columnar event log: single events and batches keep their order and dtypes."""

import numpy as np

from abm.eventlog import COLUMNS, EventKind, EventLog


def test_mixed_adds_and_batches_keep_order_and_dtypes():
    log = EventLog(group_names=["M", "F"])
    log.add(0.5, 0, 7, 1, EventKind.APPLY, 30.0, 55.0)
    log.add(0.7, 0, 3, 0, EventKind.APPLY, 20.0, 80.0)
    log.extend(np.array([0.8, 0.9]), 0, np.array([4, 5]), np.array([0, 1], np.int16), EventKind.APPLY,
               np.array([10.0, 11.0]), np.array([1.0, 2.0]))
    log.extend(1.0, 0, np.array([7, 3]), np.array([1, 0], np.int16),
               np.array([EventKind.APPROVE, EventKind.REJECT], np.int8), np.array([30.0, 20.0]),
               np.array([55.0, 80.0]), np.array([0.9, 0.1]))
    log.extend(1.0, 0, np.array([], np.int64), np.array([], np.int16), EventKind.REPAY)  # empty: no rows
    first = log.columns()
    log.extend(2.0, 1, np.array([7]), np.array([1], np.int16), EventKind.REPAY, 30.0, 64.0)
    cols = log.columns()
    assert log.count == 7
    assert [cols[c].dtype for c in log.names] == [np.dtype(d) for d in COLUMNS.values()]
    assert cols["time"].tolist() == [0.5, 0.7, 0.8, 0.9, 1.0, 1.0, 2.0]
    assert cols["agent_id"].tolist() == [7, 3, 4, 5, 7, 3, 7]
    assert cols["kind"].tolist() == [0, 0, 0, 0, 1, 2, 3]
    assert cols["episode"].tolist() == [0, 0, 0, 0, 0, 0, 1]
    assert np.isnan(cols["decision_prob"][[0, 1, 2, 3, 6]]).all()
    assert cols["decision_prob"][4:6].tolist() == [0.9, 0.1]
    assert cols["wealth_after"].tolist() == [55.0, 80.0, 1.0, 2.0, 55.0, 80.0, 64.0]
    assert len(first["time"]) == 6
    frame = log.to_frame()
    assert frame["kind"].astype(str).tolist() == ["apply"] * 4 + ["approve", "reject", "repay"]
    assert frame["group"].astype(str).tolist() == ["F", "M", "M", "F", "F", "M", "F"]


def test_the_state_column_is_named_by_the_family():
    """``<state>_after`` (``Scenario.state``): Eutopia's default ``wealth_after``, a credit family's ``score_after``."""
    assert EventLog().names[6] == "wealth_after"
    log = EventLog(group_names=["G1"], state="score")
    log.add(0.5, 0, 7, 0, EventKind.APPLY, 1.0, 4.0)
    assert list(log.to_frame().columns) == ["time", "episode", "agent_id", "group", "kind", "amount", "score_after",
                                            "decision_prob"]
    assert log.columns()["score_after"].tolist() == [4.0]


def test_disabled_log_counts_but_keeps_nothing():
    log = EventLog(enabled=False)
    log.add(0.1, 0, 1, 0, EventKind.APPLY)
    log.extend(0.2, 0, np.array([1, 2]), np.array([0, 0]), EventKind.APPROVE)
    assert log.count == 3
    assert all(len(v) == 0 for v in log.columns().values())


def test_a_logs_kind_categories_are_the_core_and_its_own_familys_only():
    """A run file does not depend on which other families the process has registered: a credit
    run's ``kind`` categories are the core kinds, admissions' add its own (in registry order)."""
    import abm.families.admissions  # noqa: F401  (registers admit, manipulate, leave)
    from abm.eventlog import kind_code
    from abm.registry import CORE_EVENT_KINDS

    credit = EventLog(family="credit_score")
    credit.add(0.5, 0, 7, 0, EventKind.APPLY)
    assert list(credit.to_frame()["kind"].cat.categories) == list(CORE_EVENT_KINDS)
    adm = EventLog(family="admissions")
    adm.add(0.5, 0, 7, 0, kind_code("manipulate"))
    adm.add(0.6, 0, 7, 0, EventKind.APPROVE)
    kinds = adm.to_frame()["kind"]
    assert list(kinds.cat.categories) == [*CORE_EVENT_KINDS, "admit", "manipulate", "leave"]
    assert kinds.astype(str).tolist() == ["manipulate", "approve"]
    stray = EventLog(family="credit_score")  # a kind of another family's, logged anyway, is kept
    stray.add(0.5, 0, 7, 0, kind_code("leave"))
    assert stray.to_frame()["kind"].astype(str).tolist() == ["leave"]
