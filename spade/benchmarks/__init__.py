"""Held-out benchmark suites, played through the same rollout and sandbox machinery as designs.

Each suite turns its benchmark's items into text environments (``HeldoutTask``: environment
source code that runs in nsjail like any design) and scores a play from its trajectory. Suites
are chosen by name (``run.heldout_suites``) and imported only when used.
"""
