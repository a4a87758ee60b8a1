"""The stages of a SPADE round as plain functions over the object store (no Prefect here).

Each stage reads what it needs, does its work, writes its artifacts under
``campaign/<id>/round-<NNNN>/<stage>/`` and commits them with a stage manifest. The Prefect
flows in ``flows/`` only compose these functions into tasks; the CLI and tests call them
directly.
"""
