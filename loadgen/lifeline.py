"""Every process loadgen starts dies with it, SIGKILL of loadgen included: servers and client
workers by PR_SET_PDEATHSIG, and what a server starts in turn by a watchdog of its group."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
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


# Per process group: the write end of its watchdog's pipe, and the watchdog.
_WATCHDOGS: dict[int, tuple[int, subprocess.Popen[bytes]]] = {}
_ALL_CLEAR = b"."
# PR_SET_PDEATHSIG reaches the server's leader only: a SIGKILLed loadgen whose
# `server: {kind: command}` forked left that child running under PID 1. The watchdog, outside
# the server's group, reads a pipe whose only writer is loadgen: EOF without the all-clear
# means loadgen died, and it SIGKILLs the whole group (SIGKILL as for the leader: nobody is
# left to wait for a graceful shutdown). It also leaves once the group is gone; the group's id
# cannot be reused while any member, a zombie leader included, is alive.
_WATCHDOG_CODE = """
import os, select, signal, sys
pgid = int(sys.argv[1])
def gone():
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False
while True:
    if select.select([0], [], [], 1.0)[0]:
        if not os.read(0, 1):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        break
    if gone():
        break
"""


def watch_group(pgid: int) -> None:
    """Starts the watchdog of the process group `pgid` (a launched server's)."""
    read_end, write_end = os.pipe()  # not inheritable: the server's processes never hold it
    try:
        watchdog = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WATCHDOG_CODE, str(pgid)],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C at the terminal is loadgen's to handle
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    _WATCHDOGS[pgid] = (write_end, watchdog)


def release_group(pgid: int) -> None:
    """Gives the group's watchdog the all-clear (loadgen stopped the group itself) and reaps
    it; nothing for a group without one."""
    entry = _WATCHDOGS.pop(pgid, None)
    if entry is None:
        return
    write_end, watchdog = entry
    with contextlib.suppress(OSError):  # it left already: the group had exited on its own
        os.write(write_end, _ALL_CLEAR)
    os.close(write_end)
    with contextlib.suppress(subprocess.TimeoutExpired):
        watchdog.wait(timeout=2.0)
