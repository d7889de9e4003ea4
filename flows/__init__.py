"""Prefect flows, one file per lifecycle, and the ``modelplane`` command line."""
