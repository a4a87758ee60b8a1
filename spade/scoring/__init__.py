"""Scoring a round's designs: one home for the designer's rewards and what they are made of.

- :mod:`~spade.scoring.rewards`: designer rewards by name (pure math), rejected designs'
  rewards, the centring per skill and the win-rate EMA;
- :mod:`~spade.scoring.outcomes`: each design attempt lined up with its environment's
  evaluation (:class:`~spade.scoring.rewards.DesignOutcome`), scored, and turned into memory
  records.

It sits above the roles (designer, agent) and below training and the pipeline; its data types
come from :mod:`spade.records`.
"""
