"""Fair sequential lending decisions on a known MDP (seed 001): pure maths, no engine."""
