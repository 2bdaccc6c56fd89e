"""Every process loadgen starts dies with it, SIGKILL of loadgen included: servers, client
workers, and what they start in turn (server/launcher.py adds a watchdog for a server's own
children)."""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

# The server's environment names its launcher, so a server that watches (the sim) can exit
# when loadgen is gone, whatever killed it.
PARENT_PID_ENV = "LOADGEN_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def die_with(parent: int) -> None:
    """Has the kernel SIGKILL this process (a client worker) when `parent` dies: a SIGKILLed
    `loadgen run --workers 2` left both workers, and the resource tracker they hold open,
    running on."""
    arm = die_with_parent(parent)
    if arm is not None:
        arm()


def die_with_parent(parent: int | None = None) -> Callable[[], None] | None:
    """A preexec_fn that has the kernel SIGKILL the server when the thread that started it
    dies (Linux prctl), SIGKILL of loadgen included; None where prctl does not exist. libc is
    looked up here, before the fork: the child only makes the call. SIGKILL, not SIGTERM:
    vLLM catches SIGTERM for a graceful shutdown that, with its client gone, was seen to hang
    on for minutes holding a core."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid() if parent is None else parent

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), signal.SIGKILL)

    return arm
