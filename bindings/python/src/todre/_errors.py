"""TodreError: a failed libtodre call, with its status and the C message."""

from ._api import Status
from ._lib import lib


class TodreError(Exception):
    """A libtodre call failed, or the Python layer refused an argument.

    Attributes:
        status: the :class:`todre.Status` (an IntEnum with the C value).
        message: the detail text (from todre_last_error() /
            todre_context_last_error() for C failures), naming the argument.
    """

    def __init__(self, status, message):
        try:
            status = Status(int(status))
        except ValueError:
            pass
        self.status = status
        self.message = message
        super().__init__(f"{self.status_name}: {message}")

    @property
    def status_name(self):
        return lib.todre_status_string(int(self.status)).decode()


def check(status, ctx=None):
    """Raise TodreError for a non-OK status, with the matching detail text.

    `ctx` is the raw context handle of a call that took one; its message is
    preferred since the thread-local one may be overwritten by later calls.
    """
    if status == 0:
        return
    raw = lib.todre_context_last_error(ctx) if ctx else None
    if not raw:
        raw = lib.todre_last_error()
    raise TodreError(status, (raw or b"").decode(errors="replace"))


def invalid(message):
    """A TodreError(INVALID_ARGUMENT) for an argument the Python layer refuses."""
    return TodreError(Status.INVALID_ARGUMENT, message)
