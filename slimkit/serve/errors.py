"""The server's refusal type: an HTTP status and a message saying what to send instead."""

from __future__ import annotations


class RequestError(Exception):
    """A request the server refuses: HTTP ``status`` and a message saying what to send instead."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.headers = status, headers or {}


__all__ = ["RequestError"]
