"""Stand-ins at the project's true boundaries, for the tests and the benchmarks alike.

- :mod:`spade.testing.openai_server`: an OpenAI-compatible HTTP server answering from a
  script (the model server's boundary);
- :mod:`spade.testing.scripted_designer`: a scripted model for it that designs, hints and
  plays so that each environment's regret is known exactly;
- :mod:`spade.testing.tiny_models`: a character-level tokenizer and a tiny Llama config, for
  the random-weight models tests train and serve;
- :mod:`spade.testing.synthetic`: a synthetic campaign written to an object store (what the
  dashboard reads);
- :mod:`spade.testing.processes`: free ports, process groups stopped for good, and the
  system's Chromium under playwright.

Nothing else in ``spade`` imports this package (``import spade`` stays light); it never
imports Prefect.
"""
