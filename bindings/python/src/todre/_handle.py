"""Lifetime and thread plumbing shared by the objects that own a C handle."""

import functools
import threading


class OwnsHandle:
    """Mixin: `with obj:` and garbage collection both end in `obj.close()`,
    which each subclass defines (idempotent, frees the C handle).

    Every object also carries a lock that its C calls hold: libtodre's handles
    are used by one thread at a time, so an object shared between Python
    threads (the GIL is released during C calls) has its calls take turns
    instead of racing on the handle; close() waits for a call in progress and
    a later call raises TodreError STATE ("already closed")."""

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        self._lock = threading.RLock()
        return self

    def close(self):
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass


def serialized(method):
    """A method of an OwnsHandle that runs holding the object's lock."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return locked
