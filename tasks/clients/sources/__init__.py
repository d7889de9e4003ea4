"""The model sources the downloader fetches from: Hugging Face (:mod:`.hf`) and S3 (:mod:`.s3`).

Both transports take the same :class:`~tasks.clients.sources.credentials.Credentials`, answer a listing with
:mod:`.listing`'s types and fail with :mod:`.errors`' typed download failures; :mod:`tasks.downloader` plans,
locks, fetches and verifies with them.
"""
