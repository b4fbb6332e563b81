"""The encoding pool (data/pool.py) under stop signals: whichever signal reaches the process group, wherever it lands,
the handler the process had takes it once, after every worker has ended; nothing is left holding the process's
pipes. Each case runs in a process of its own session, so that a signal to its group reaches its workers too, as a
terminal's Ctrl-C, a hangup or a batch system's SIGTERM to every process of a job does."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from ds_minimodel.data.pool import ordered_map

# The process's own handler raises where the signal arrives, as the pipeline's does; `WHERE` says when the whole group
# gets the signal: while the input is read, while the consumer works on a result, or from a worker as it starts
# (landing anywhere in the pool's start-up).
CASE = """
import multiprocessing, os, signal, sys, time
from ds_minimodel.data.pool import ordered_map

class Stopped(BaseException):
    pass

def stop(signum, frame):
    raise Stopped(signum)

def square(x):
    time.sleep(0.02)
    return x * x

def send_at_start():
    os.killpg(0, SIG)

SIG, WHERE = getattr(signal, sys.argv[1]), sys.argv[2]
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, stop)

def items():
    for i in range(200):
        if WHERE == "input" and i == 10:
            os.killpg(0, SIG)
        yield i

got = []
try:
    for value in ordered_map(square, items(), 2, initializer=send_at_start if WHERE == "start" else None):
        got.append(value)
        if WHERE == "consumer" and len(got) == 5:
            os.killpg(0, SIG)
except Stopped as err:
    assert err.args == (SIG,), err.args
    assert got == [i * i for i in range(len(got))], got
    assert multiprocessing.active_children() == [], multiprocessing.active_children()
    assert len(got) < 200, "the input was read to its end after the signal"
    print("stopped after", len(got), flush=True)
else:
    print("never stopped", flush=True)
"""


@pytest.mark.parametrize("where", ["input", "consumer", "start"])
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_signal_to_the_whole_group_ends_every_worker_then_reaches_the_handler_once(sig, where):
    proc = subprocess.Popen([sys.executable, "-c", CASE, sig, where], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:  # communicate() returns once every process holding the pipes has ended, the workers included
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], check=False)
        raise AssertionError(f"{sig} while {where}: still running after 60 s (a worker stranded)") from None
    assert proc.returncode == 0 and out.startswith("stopped after"), (out, err[-2000:])
    assert "Traceback" not in err and "Exception ignored" not in err, err[-2000:]


def test_without_a_signal_every_result_comes_in_order_and_the_handlers_are_as_they_were():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    assert list(ordered_map(abs, range(-50, 50), 2)) == [abs(i) for i in range(-50, 50)]
    assert {sig: signal.getsignal(sig) for sig in before} == before
