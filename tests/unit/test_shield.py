"""Interrupts held during bookkeeping and delivered at network waits, with real signals."""

from __future__ import annotations

import os
import signal
import time

import pytest

import createos_sync as cs
from createos_sync._sandboxes import shield as _shield


def interrupt() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # the handler runs at the next bytecode boundary: well within this


def test_an_interrupt_during_held_code_lands_when_it_ends() -> None:
    ran = []
    with pytest.raises(KeyboardInterrupt), _shield.held():
        interrupt()
        ran.append("after the interrupt")
    assert ran == ["after the interrupt"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_interrupt_acts_at_once_inside_delivered_and_a_held_one_on_entry() -> None:
    ran = []
    with _shield.held():
        with pytest.raises(KeyboardInterrupt), _shield.delivered():
            interrupt()
            ran.append("not reached")
        interrupt()  # held again
        with pytest.raises(KeyboardInterrupt), _shield.delivered():
            ran.append("not reached either: the held one is delivered on entry")
        ran.append("held code goes on")
    assert ran == ["held code goes on"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_held_interrupt_delivered_during_an_exception_carries_its_cleanup_notes() -> None:
    failure = cs.CreateosCleanupError("sandbox sb-9 may still run", sandbox_id="sb-9")
    with pytest.raises(KeyboardInterrupt) as caught, _shield.held():
        interrupt()
        raise failure
    assert caught.value.__context__ is failure
    assert cs.is_cleanup_error(caught.value)
    assert any("sb-9" in note for note in caught.value.__notes__)


def test_a_user_handler_is_used_and_an_ignored_signal_stays_ignored() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with _shield.held():
            interrupt()
            assert seen == []  # held
        assert seen == [signal.SIGINT]  # then given to the user's own handler
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with _shield.held():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
