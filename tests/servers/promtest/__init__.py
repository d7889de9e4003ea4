"""Real-Prometheus test fixtures: a fake vLLM exporter and a Prometheus launcher."""
