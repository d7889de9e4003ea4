"""One migrated Prefect database for every Prefect home the tests create.

A Prefect server, or a command's ephemeral API, migrates a new SQLite database to the installed Prefect's
schema the first time it starts on a home: about 15 s of CPU on this 2-core machine, paid again by every
fresh home (each pytest-xdist worker's own home, each test Prefect server, each CI-pipeline and demo test).
The tests instead migrate one database per Prefect version, once for all workers and test runs of the
machine, and copy it into each new home, where Prefect finds it at its head revision and starts at once.
What the migration itself does is Prefect's to test; what is tested here starts from the same schema.

The same goes for the block types a server registers when it starts (``PREFECT_API_BLOCKS_REGISTER_ON_START``):
about 2 s of CPU per server start, a dozen starts per test run, and the same rows every time. The template is
registered once, and the tests' servers start with the setting off (:data:`SERVER_ENV`): their databases hold
what a registering start would have written.

And every Prefect client the tests' processes make loads a certificate bundle it never uses: they trust one
certificate (:func:`trust_env`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from importlib.metadata import version

import certifi

DATABASE = "prefect.db"
SERVER_ENV = {"PREFECT_API_BLOCKS_REGISTER_ON_START": "false"}
"""Settings for every Prefect server or ephemeral API the tests start on a seeded home: the block types are
in the template already."""
PREPARE = """
import asyncio

import prefect.plugins
from prefect.server.database import provide_database_interface
from prefect.server.database.alembic_commands import alembic_upgrade
from prefect.server.models.block_registration import run_block_auto_registration
from prefect.utilities.asyncutils import run_sync_in_worker_thread


async def prepare() -> None:
    await run_sync_in_worker_thread(alembic_upgrade)  # what `prefect server database upgrade -y` runs
    prefect.plugins.load_prefect_collections()  # as a starting server does: the installed collections' blocks
    session = await provide_database_interface().session()
    async with session:
        await run_block_auto_registration(session=session)
        await session.commit()


asyncio.run(prepare())
"""
"""The migration to Prefect's head revision and a starting server's block registration, in one process (two
processes imported Prefect's server twice: 26 s of CPU against 20 s)."""


def template_dir() -> pathlib.Path:
    """Where this machine keeps the migrated database of the installed Prefect (one per Prefect version)."""
    name = f"modelplane-tests-prefect-db-{version('prefect')}-blocks-{os.getuid()}"
    return pathlib.Path(tempfile.gettempdir()) / name


@contextlib.contextmanager
def _locked(directory: pathlib.Path) -> Iterator[None]:
    """Hold the directory's lock: one process migrates while the others wait for its result."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def migrated_database() -> pathlib.Path:
    """The migrated database, made by :data:`PREPARE` the first time it is asked for (``./dev.sh test`` asks
    while the olah virtualenv installs, so that a fresh machine's workers do not wait on it).

    It is migrated under another name and renamed when complete, so an interrupted migration never leaves a
    half-made template; its write-ahead log is folded into the file so that a plain copy is the whole database.
    """
    directory = template_dir()
    template = directory / DATABASE
    with _locked(directory):
        if not template.exists():
            partial = directory / f"{DATABASE}.partial"
            partial.unlink(missing_ok=True)
            env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
            env.update(
                PREFECT_HOME=str(directory / "home"),
                PREFECT_API_DATABASE_CONNECTION_URL=f"sqlite+aiosqlite:///{partial}",
                PREFECT_SERVER_ANALYTICS_ENABLED="false",
            )
            made = subprocess.run([sys.executable, "-c", PREPARE], env=env, capture_output=True, text=True, timeout=600)
            if made.returncode != 0:
                raise RuntimeError(f"the Prefect database template was not made: {made.stderr[-3000:]}")
            with contextlib.closing(sqlite3.connect(partial)) as db:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                db.execute("PRAGMA journal_mode = DELETE")
            partial.rename(template)
    return template


def one_certificate_bundle() -> pathlib.Path:
    """A CA bundle of one certificate (the first of certifi's, Prefect's default bundle), made once per machine
    beside the template database."""
    directory = template_dir()
    bundle = directory / "one-certificate.pem"
    if not bundle.exists():
        directory.mkdir(parents=True, exist_ok=True)
        text = pathlib.Path(certifi.where()).read_text()
        end = "-----END CERTIFICATE-----"
        first = text[text.index("-----BEGIN CERTIFICATE-----") : text.index(end) + len(end)]
        partial = directory / f"one-certificate.{os.getpid()}.partial"
        partial.write_text(first + "\n")
        partial.rename(bundle)
    return bundle


def trust_env() -> dict[str, str]:
    """The trust store of every process the tests start: one certificate (``SSL_CERT_FILE`` and Prefect's own
    ``PREFECT_API_SSL_CERT_FILE``).

    Prefect 3.8 builds an SSL context from its CA bundle for every client it makes (``get_client``, the sync
    client, the version check), whatever the API's scheme, and importing ``prefect.blocks`` builds two more for
    httpx transports (from ``SSL_CERT_FILE`` when set, else certifi): 35 ms of CPU each for a bundle of 140
    certificates. A full run of the suite made about 1,400 of them (54 s of CPU, in the commands, flow-run
    processes, ``prefect deploy``, workers, servers and the pytest-xdist workers' in-process flows). No test
    connects over TLS (every server the tests start is plain HTTP on 127.0.0.1), so no context is ever used to
    verify anything: one certificate loads in 0.4 ms and changes nothing the tests observe."""
    bundle = str(one_certificate_bundle())
    return {"SSL_CERT_FILE": bundle, "PREFECT_API_SSL_CERT_FILE": bundle}


def seed_prefect_home(home: pathlib.Path) -> pathlib.Path:
    """Give a new Prefect home the migrated database (a home that already has one keeps it); returns ``home``."""
    home.mkdir(parents=True, exist_ok=True)
    target = home / DATABASE
    if not target.exists():
        shutil.copyfile(migrated_database(), target)
    return home


if __name__ == "__main__":
    print(migrated_database())
