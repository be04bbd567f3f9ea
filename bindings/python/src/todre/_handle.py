"""Lifetime plumbing shared by the objects that own a C handle."""


class OwnsHandle:
    """Mixin: `with obj:` and garbage collection both end in `obj.close()`,
    which each subclass defines (idempotent, frees the C handle)."""

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
