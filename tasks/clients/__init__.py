"""Thin typed clients, one per external system the lifecycles talk to.

- :mod:`tasks.clients.cluster`: the Kubernetes API (or a manifests directory standing in for it), with its
  Kubernetes Event recorder;
- :mod:`tasks.clients.metrics`: live load from Prometheus, or from a metrics file;
- :mod:`tasks.clients.sources`: the model sources the downloader fetches from (Hugging Face, S3);
- :mod:`tasks.clients.oci`: image labels from OCI registries;
- :mod:`tasks.clients.pushgateway`: a flow run's metrics pushed to a Prometheus Pushgateway;
- :mod:`tasks.clients.events`: Prefect events that chain the lifecycles;
- :mod:`tasks.clients.files`: durable file writes;
- :mod:`tasks.clients.streams`: an HTTP answer read whole within a size and a time.

A client knows its system's protocol and nothing of a lifecycle; the lifecycle modules beside this package
(``tasks/aim/``, ``tasks/optimize/``, ``tasks/warm_caches.py``, ...) read through the clients, call the engine's plan
and write. The import contracts in ``pyproject.toml`` keep the clients below the lifecycles and apart from
each other.
"""
