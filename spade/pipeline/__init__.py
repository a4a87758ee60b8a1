"""The stages of a SPADE round as plain functions over the object store (no Prefect here).

One module per stage, named after it: ``documents``, ``design``, ``verify``, ``hint``,
``pool``, ``evaluate`` (the in-round hinted and unhinted plays), ``score``, ``memory``,
``train``, ``publish``, ``heldout``. Every stage function takes the round's
:class:`~spade.pipeline.context.RoundContext` first (the config, the campaign store and the
sandbox policy, opened once per round), reads what it needs, does its work, writes its
artifacts under ``campaign/<id>/round-<NNNN>/<stage>/`` and commits them with a stage manifest
(:mod:`spade.pipeline.record`). The Prefect flows in ``flows/`` only compose these functions
into tasks; the CLI and tests call them directly.
"""
