"""A rank an elastic job adds gets the variables blinkrun forwards, and their values are on no
command line and in no file of the job (grow_env_script.py): a token, a password or a cloud key
in blinkrun's environment would otherwise be readable by every user of the host."""
import json
import os
import stat
import uuid

import pytest

from blinkrun_helpers import run_blinkrun

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grow_env_script.py")
pytestmark = pytest.mark.mpi


def test_a_new_ranks_forwarded_values_travel_on_no_command_line_and_in_no_file(tmp_path):
    name, value = "GROW_TEST_CLOUD_TOKEN", f"secret-{uuid.uuid4().hex}"
    slots = tmp_path / "slots"
    slots.write_text("localhost:2\n")
    discover = tmp_path / "discover.sh"
    discover.write_text(f"#!/bin/sh\ncat {slots}\n")
    discover.chmod(discover.stat().st_mode | stat.S_IEXEC)
    done = run_blinkrun(["-np", "2", "--host-discovery-script", str(discover), "python", SCRIPT, str(slots), name],
                        timeout=180, env={name: value})
    assert done.returncode == 0, done.stderr[-3000:]
    line = next((line for line in done.stdout.splitlines() if "RESULT " in line), None)
    assert line is not None, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(line.split("RESULT ", 1)[1])
    assert result["seen"] == [value] * 3
    assert result["hosts_file"] is False, "the hosts file holds the value"
    assert result["command_lines"] == [], "a command line holds the value"
