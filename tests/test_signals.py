"""The one signal policy (vpintegrator._signals): handlers are installed for a block and restored after."""

from __future__ import annotations

import signal
import sys

import pytest
from click.testing import CliRunner

from vpintegrator import _signals
from vpintegrator.cli.gen import main as gen_main
from vpintegrator.studies.runner import sigterm_as_interrupt
from vpintegrator.training.loop import StopRequest


def _mine(signum, frame):  # a user's own handler, which every block must give back
    pass


@pytest.fixture
def own_handlers():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in before:
        signal.signal(s, _mine)
    yield
    for s, h in before.items():
        signal.signal(s, h)


def _current():
    return {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}


def test_handling_restores_after_the_block_and_after_an_error(own_handlers):
    def handler(signum, frame):
        pass

    with _signals.handling((signal.SIGTERM,), handler):
        assert signal.getsignal(signal.SIGTERM) is handler
        assert signal.getsignal(signal.SIGINT) is _mine
    assert _current() == {signal.SIGINT: _mine, signal.SIGTERM: _mine}
    with pytest.raises(RuntimeError), _signals.handling((signal.SIGINT, signal.SIGTERM), handler):
        raise RuntimeError("boom")
    assert _current() == {signal.SIGINT: _mine, signal.SIGTERM: _mine}


def test_sigterm_raises_keyboard_interrupt_inside_and_is_remembered():
    with _signals.interrupts_raise():
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
        with pytest.raises(KeyboardInterrupt):
            _signals.check_terminated()  # the signal is remembered for long loops
    _signals.check_terminated()  # ... but not after the block: the next command starts clean


def test_interrupts_raise_leaves_a_users_sigint_handler_alone(own_handlers):
    with _signals.interrupts_raise():
        assert signal.getsignal(signal.SIGINT) is _mine  # someone else's SIGINT handler is not replaced
        assert signal.getsignal(signal.SIGTERM) is not _mine
    assert _current() == {signal.SIGINT: _mine, signal.SIGTERM: _mine}


def test_an_in_process_cli_call_leaves_handlers_and_hooks_as_they_were(own_handlers):
    hook = sys.unraisablehook
    result = CliRunner().invoke(gen_main, ["--list"])
    assert result.exit_code == 0, result.output
    assert _current() == {signal.SIGINT: _mine, signal.SIGTERM: _mine}
    assert sys.unraisablehook is hook


@pytest.mark.parametrize("block", [StopRequest, sigterm_as_interrupt], ids=["training", "studies"])
def test_training_and_studies_restore_handlers(own_handlers, block):
    with block():
        assert signal.getsignal(signal.SIGTERM) is not _mine
    assert _current() == {signal.SIGINT: _mine, signal.SIGTERM: _mine}


def test_stop_request_sets_a_flag_then_aborts_on_the_second_signal():
    with StopRequest() as stop:
        signal.raise_signal(signal.SIGINT)
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
