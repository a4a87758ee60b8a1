"""Prefect flows over the ``spade`` library: thin tasks around plain ``spade.*`` functions.

``spade/`` never imports Prefect; everything Prefect-specific (tasks, flows, cache policies,
result storage) lives here.
"""
