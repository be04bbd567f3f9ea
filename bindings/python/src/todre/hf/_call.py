"""Per-call state of an enabled generate().

Everything one generate() call decides or records (its nesting depth, the
stage-2 prefill of the forward that is running, that forward's attention mask
and mask format, what stats() will report) lives in a Call object that belongs
to that call alone. The hooks installed on the model are shared by every
caller; they find the Call of the generate() they run in through a context
variable, so generate() calls running at the same time in several threads (or
in several contexts of one thread) never see each other's state, and a hook
that runs outside an enabled generate() (a plain forward, training) finds no
Call and leaves the model alone.
"""

import contextlib
import contextvars
import threading

import todre

# {owner: Call} for the enabled generate() calls running in this context. A new
# mapping is set for each call and reset when it returns, so a thread (which
# starts with an empty context) only ever sees its own calls.
_ACTIVE = contextvars.ContextVar("todre_hf_calls", default=None)


class Call:
    """The state of one enabled generate() call."""

    def __init__(self):
        self.depth = 0            # > 1: a generate() nested in this one (the model as assistant)
        self.stage1 = {}          # stats of stage 1
        self.stage2 = {}          # stats of stage 2
        self.prefill = None       # the stage-2 Prefill (or cached layouts) of the running forward
        self.forward_mask = None  # the running forward's 2-D attention mask, if any
        self.eager = False        # the running forward's mask format: additive float (eager)
        self.record = False       # whether the running prefill is the top-level call's

    def stats(self):
        out = dict(self.stage1)
        out.update(self.stage2)
        return out


def active(owner):
    """The Call of the enabled generate() of `owner` running in this context, or None."""
    calls = _ACTIVE.get()
    return None if calls is None else calls.get(owner)


class Owner:
    """What the calls of one enabled model share: how many are running (so that
    enable() / disable() can refuse to pull hooks from under them) and, per
    thread, the stats of the last call that thread made."""

    def __init__(self):
        self._init_runtime()

    def _init_runtime(self):
        self._lock = threading.Lock()
        self._running = 0
        self._local = threading.local()

    def __getstate__(self):                   # copy.deepcopy(model): a fresh, idle owner
        state = dict(self.__dict__)
        for key in ("_lock", "_running", "_local"):
            state.pop(key, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_runtime()

    @property
    def running(self):
        with self._lock:
            return self._running

    def last_stats(self):
        return dict(getattr(self._local, "stats", {}))

    @contextlib.contextmanager
    def call(self):
        """Enter (or, for a nested generate() of the same model in the same
        context, re-enter) this owner's Call."""
        calls = _ACTIVE.get() or {}
        frame = calls.get(self)
        token = None
        if frame is None:
            frame = Call()
            with self._lock:
                self._running += 1
            token = _ACTIVE.set({**calls, self: frame})
        frame.depth += 1
        try:
            yield frame
        finally:
            frame.depth -= 1
            if token is not None:
                _ACTIVE.reset(token)
                with self._lock:
                    self._running -= 1
                self._local.stats = frame.stats()

    def check_idle(self, what):
        """TodreError STATE when a generate() of this model is running anywhere."""
        n = self.running
        if n:
            raise todre.TodreError(
                todre.Status.STATE,
                f"model: {what}() while {n} generate() call{'s' if n > 1 else ''} of this "
                "model {} running; call it when none is".format("are" if n > 1 else "is"))
