"""The ranks' reading of blinkrun's hosts file (blinkflow.elastic.grow), without MPI."""
import json

from blinkflow.elastic.grow import read_requests


def write(tmp_path, body) -> str:
    path = tmp_path / "elastic-hosts.json"
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return str(path)


BODY = {"schema": 1, "wdir": "/work", "forward": ["PATH", "TOKEN"], "requests": [
    {"id": 1, "host": "a", "info_key": "host", "procs": [{"slot": 2, "argv": ["python", "-m", "wrapper"]}]},
    {"id": 2, "host": "b", "info_key": "add-host", "procs": [{"slot": 3, "argv": ["python", "-m", "wrapper"]}]}]}


def test_only_requests_not_acted_on_with_the_working_folder(tmp_path):
    path = write(tmp_path, BODY)
    assert [r["id"] for r in read_requests(path, after=0)] == [1, 2]
    assert read_requests(path, after=1) == [dict(BODY["requests"][1], wdir="/work", forward=["PATH", "TOKEN"])]
    assert read_requests(path, after=2) == []


def test_no_file_no_requests(tmp_path):
    assert read_requests(None, 0) == [] and read_requests(str(tmp_path / "missing.json"), 0) == []


def test_a_file_not_as_blinkrun_writes_it_is_logged_and_asks_for_nothing(tmp_path, caplog):
    for body in ("{not json", json.dumps({"requests": [{"host": "a"}]}), json.dumps([1, 2])):
        caplog.clear()
        assert read_requests(write(tmp_path, body), 0) == []
        assert any("cannot read the hosts file" in r.getMessage() for r in caplog.records), body
