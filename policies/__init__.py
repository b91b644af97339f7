"""Decision modules for the bank: one protocol (``policies.base.Policy``), one registry.

Torch lives only in this package (learning lenders); heuristics, oracle and the one-step
predictor are numpy/scikit-learn.
"""
