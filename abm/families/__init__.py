"""Scenario families: each supplies a scenario model (its config sections) and a world.

A family module defines ``Scenario`` (a ``abm.config.ScenarioBase`` subclass with
``family: Literal[name]`` and the ``capabilities`` it offers policies) and ``World`` (the
``abm.world.World`` protocol, plus any optional capability protocols of ``abm.world`` it
implements). To add a family: write its module and list it in ``abm.registry.FAMILIES`` (and
its own event kinds, if any, in ``abm.registry.FAMILY_EVENT_KINDS``).
"""
