"""Shared fixtures: everything offline (the PostgreSQL server is started from the pgserver wheel)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import shutil  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """No test writes to the user's ~/.cache."""
    monkeypatch.setenv("HIQA_CACHE_DIR", str(tmp_path / "hiqa-cache"))


# --- the server --------------------------------------------------------------------------------
class Server:
    def __init__(self, url: str, pgdata: Path | None) -> None:
        from sqlalchemy import create_engine

        from llama_index_hiqa.storage.pg_connection import _driver_url

        self.url = url
        self.pgdata = pgdata  # only for a pgserver instance (its pg_hba.conf can be edited)
        self.admin = create_engine(_driver_url(url, "psycopg2"), isolation_level="AUTOCOMMIT")

    def sql(self, statement: str) -> None:
        with self.admin.connect() as conn:
            conn.exec_driver_sql(statement)

    def database(self, user: str | None = None, password: str | None = None) -> str:
        """A new empty database; its URL (as ``user`` when given)."""
        from sqlalchemy.engine import make_url

        name = f"hiqa_test_{uuid.uuid4().hex[:10]}"
        self.sql(f"CREATE DATABASE {name}")
        url = make_url(self.url).set(database=name)
        if user is not None:
            url = url.set(username=user, password=password)
        return url.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    given = os.environ.get("HIQA_TEST_POSTGRES_URL")
    if given:
        yield Server(given, None)
        return
    pgserver = pytest.importorskip("pgserver")
    # Not under pytest's tmp folder: the server runs as its own user, which must reach the path.
    pgdata = Path(tempfile.mkdtemp(prefix="hiqa-test-pg-"))
    instance = pgserver.get_server(str(pgdata), cleanup_mode=None)
    yield Server(instance.get_uri(), pgdata)
    # Immediate shutdown (SIGQUIT to the postmaster): a throw-away cluster needs no checkpoint.
    pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGQUIT)
    shutil.rmtree(pgdata, ignore_errors=True)
