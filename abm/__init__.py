"""abm: an agent-based, discrete-event engine for the long-run fairness of lending policies.

Applicants, groups and the bank are Mesa agents on one SimPy clock; scenario families
(``abm.families``) say how a population is generated, how applications arrive, what an
observation is and what a decision does. Policies live in the top-level ``policies`` package.
"""

__version__ = "0.1.0"
