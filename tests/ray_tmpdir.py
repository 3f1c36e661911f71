"""RAY_TMPDIR folders for the tests that start Ray, removed when the test is done with them.

They sit directly under /tmp because Ray puts unix sockets under RAY_TMPDIR and a socket path
must stay below 108 bytes, which a folder under pytest's ``tmp_path`` would pass.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def ray_tmpdir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="w2ray", dir="/tmp")
    try:
        yield path
    finally:
        # Ray's processes are stopped by then; a file one of them still writes is no reason to fail.
        shutil.rmtree(path, ignore_errors=True)
