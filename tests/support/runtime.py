"""The one way tests start `joinplane_local`: in-process, on a free port, its log kept off the
terminal unless a test asks for it."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from joinplane_local.runtime import Runtime, start_runtime
from joinplane_local.template import TEMPLATE


@contextmanager
def local_runtime(
    *, template_path: Path = TEMPLATE, seed: bool = True, log: TextIO | None = None
) -> Iterator[Runtime]:
    """`make run`'s runtime (the project's template, seeded with the dev tenant's admin key) unless
    told otherwise; stopped, and its tables deleted, when the block ends."""
    with start_runtime(port=0, template_path=template_path, seed=seed, log=log or io.StringIO()) as running:
        yield running
