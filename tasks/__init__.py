"""Prefect tasks that touch the world, in two kinds of modules.

:mod:`tasks.clients` holds one thin typed client per external system (Kubernetes, Prometheus, Hugging Face and
S3, OCI registries, the Pushgateway, Prefect events, files). Beside it, one I/O module per lifecycle (``aim/``,
``optimize/``, ``warm_caches.py``, ``rollout_models.py``, ...) reads through the clients, calls the engine's plan
and writes; a few modules hold the I/O several lifecycles share (``caches.py``, ``workloads.py``, ``boundary.py``,
``downloader/``, the writer lock). The import contracts in ``pyproject.toml`` keep that order.
"""
