"""Scenario families: each supplies a scenario model (its config sections) and a world.

A family module defines ``Scenario`` (a ``abm.config.ScenarioBase`` subclass with
``family: Literal[name]`` and what the rest of abm reads about the family: the ``capabilities``
it offers policies, its axis ``units``, its own ``event_kinds``, the live view's
``live_parameters`` and ``live_plots``) and ``World`` (the ``abm.world.World`` protocol, plus any
optional capability protocols of ``abm.world`` it implements). To add a family: write its module
here, named as the family (the registry finds every module here that defines ``Scenario``), with
a scenario file in ``scenarios/`` and its section in docs/MODEL.md.
"""
