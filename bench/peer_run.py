"""Runs one benchmark command (troubadour's binary or a peer's `run`) and
returns its JSON line: shared by bench/cluster/run and bench/remote/run.
Python 3 standard library only."""

import json
import os
import signal
import subprocess


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
