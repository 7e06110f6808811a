"""A real S3 server for tests: moto in server mode on 127.0.0.1, with the AWS variables pointing at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pytest

BUCKET = "corpora"


@pytest.fixture(scope="module")
def s3() -> Iterator[pafs.S3FileSystem]:
    """A moto S3 server on 127.0.0.1 and the AWS variables pointing at it, for the module."""
    server_module = pytest.importorskip("moto.server", reason="needs moto[server] (the [test] extra)")

    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
    }
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        fs = pafs.S3FileSystem(endpoint_override=env["AWS_ENDPOINT_URL"], allow_bucket_creation=True)
        fs.create_dir(BUCKET)
        yield fs
    server.stop()


def upload(fs: pafs.S3FileSystem, folder: Path, prefix: str) -> str:
    """Copy ``folder`` to ``s3://corpora/<prefix>``; returns that URL."""
    pafs.copy_files(str(folder), f"{BUCKET}/{prefix}", destination_filesystem=fs)
    return f"s3://{BUCKET}/{prefix}"
