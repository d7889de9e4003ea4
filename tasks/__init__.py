"""Prefect tasks and clients that touch the world: Kubernetes, Prometheus, OCI registries, S3, Hugging Face."""
