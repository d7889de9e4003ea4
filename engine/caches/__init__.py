"""Model caches: where weights come from, what a cache is called and sized, and what each ModelCache needs.

Decides the source of every model reference, the identity and PVC size of its cache, which caches other
resources request, and the PVC and fill Job a ModelCache needs plus its status.
"""
