"""The designer role: prompts, code extraction, batches of designs with repairs, and hints.

- :mod:`~spade.designer.designer`: one batch of designs (prompt, generate, extract, verify,
  repair), then :mod:`~spade.designer.hints`;
- :mod:`~spade.designer.strategies`: how a design is asked for, sampled, read and repaired, one
  module per ``designer.strategy`` (write, edit, splice, scaffold);
- :mod:`~spade.designer.corpus`: the grounding documents; :mod:`~spade.designer.skills`: which
  skill each slot designs for; :mod:`~spade.designer.prompts`, :mod:`~spade.designer.extract`,
  :mod:`~spade.designer.inherit`: the prompt text, the code in an answer, and an edit's
  inherited definitions.
"""
