"""Packaging: the metadata and dependencies are in setup.cfg; this file only says what the
wheel holds. The packages ``abm`` and ``policies`` (the top-level layout the project keeps),
and the scenario files of ``scenarios/`` as package data ``abm/scenarios/`` (``abm init DIR``
copies them; a source checkout reads ``scenarios/`` itself)."""

from setuptools import find_packages, setup

setup(
    # abm.scenarios.studies named too: setuptools warns that a data folder it can see but is not
    # told about will be left out by a future release
    packages=find_packages(include=["abm", "abm.*", "policies", "policies.*"])
    + ["abm.scenarios", "abm.scenarios.studies"],
    package_dir={"abm.scenarios": "scenarios"},
    package_data={"abm.scenarios": ["*.yaml"], "abm.scenarios.studies": ["*.yaml"]},
)
