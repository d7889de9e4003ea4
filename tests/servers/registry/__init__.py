"""A real OCI registry (Debian ``docker-registry``) for tests: plain, htpasswd and bearer-token modes."""
