"""Runs one benchmark command (troubadour's binary or a peer's `run`) and
returns its JSON line, and times the machine's core-to-core round trip:
shared by bench's runners. Python 3 standard library only."""

import json
import os
import signal
import subprocess


CORE_LATENCY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "target", "release", "core-latency")


def core_rtt():
    """The machine's core-to-core round trip now, in ns, or None where
    `core-latency` is not built (`cargo build --release` in bench/) or
    failed. Decision 0058: a VM's vCPUs may sit on cores that share a
    cache or on cores that do not, and every message between cores pays
    the difference, so a run is only comparable with runs at the same
    placement."""
    if not os.path.isfile(CORE_LATENCY):
        return None
    return run_json([CORE_LATENCY, "--json"], os.path.dirname(CORE_LATENCY), timeout=30).get("core_rtt_ns")


def run_json(cmd, cwd, timeout=900):
    """The last JSON line `cmd` prints, or a failed result saying why.

    The command runs in a session of its own; when it runs past `timeout`
    seconds the whole session is killed, the processes it started too (a
    peer's other nodes), or they would hold their ports and cores through
    every later run."""
    try:
        p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    except OSError as e:
        return {"ok": False, "error": str(e)}
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return {"ok": False, "error": f"timed out after {timeout} s"}
    for line in reversed(stdout.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return {"ok": False, "error": f"no JSON line (status {p.returncode}): {stderr.strip()[-300:]}"}
