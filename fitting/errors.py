"""`ParlourError`: the one base of the errors a client is told, each kind carrying what it is told.

It lives in `fitting/`, the bottom layer (which imports nothing of Parlour's), so that every layer
can raise it: `fitting` itself, `models`, and `voice`'s store, turns and front ends. As h11's
`ProtocolError` carries `error_status_hint`, each kind states as class attributes
- `code`: the code of the Realtime `error` event that tells it (Wyoming's `error` event carries it
  too), and
- `status`: the HTTP status the HTTP APIs answer it with.
An instance may override either (`code=`, `status=`) where one kind covers several cases. The front
ends read both from the error, so no front end keeps a table of kinds; what is not a ParlourError
is a bug, and each front end tells it as its internal error. A kind that was a `ValueError`,
`KeyError` or `RuntimeError` stays one too, for the callers that catch those.
"""

from __future__ import annotations

from http import HTTPStatus


class ParlourError(Exception):
    """An error a client is told: its message, its `code` and its HTTP `status`. Every kind states
    both (tests/unit/test_errors.py checks); this base is never raised itself."""

    code: str
    status: HTTPStatus

    def __init__(self, *args: object, code: str | None = None, status: HTTPStatus | None = None):
        super().__init__(*args)
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
