"""`fleet status`'s reason for a ready step short of cores gives the free count as it is
when asked (fleet.core.queueview), not as it was at the step's last try: a release too
small to let it fit is never tried, and before 2026-12-06 "needs 2 cores, 0 free" stood
while a core was free."""

from __future__ import annotations

import json

from fleetharness import assert_nothing_left, fleet, spawn, finish, wait_for, write_suite


def _status(run_dir) -> dict:
    r = fleet("status", "--run-dir", str(run_dir), "--json", cwd=run_dir.parent, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_a_ready_steps_free_cores_are_counted_when_status_is_asked_not_at_its_last_try(tmp_path):
    run_dir = tmp_path / "up"
    fleet("up", "--local", "--nodes", "2", "--run-dir", str(run_dir), cwd=tmp_path, check=True, timeout=90)
    run = None
    try:
        per = [n["cores"] for n in _status(run_dir)["nodes"]]
        wait = 'while [ ! -e {} ]; do sleep 0.05; done'
        suite = write_suite(tmp_path / "s.toml", f'''[suite]
name = "free"
[[steps]]
id = "short"
cores = {per[0]}
command = "{wait.format(tmp_path / 'go')}"
[[steps]]
id = "long"
cores = {per[1]}
command = "{wait.format(tmp_path / 'stop')}"
[[steps]]
id = "wide"
cores = {sum(per)}
span = true
command = "true"
''')
        run = spawn("run", str(suite), "--run-dir", str(run_dir), cwd=tmp_path)
        wait_for(lambda: [h["reason"] for h in _status(run_dir)["ready"]] == [f"needs {sum(per)} cores, 0 free"],
                 60, "wide to wait with no core free")
        (tmp_path / "go").touch()
        wait_for(lambda: _status(run_dir)["counts"].get("succeeded") == 1, 60, "short to end")
        [head] = _status(run_dir)["ready"]
        assert head["step"] == "wide" and head["reason"] == f"needs {sum(per)} cores, {per[0]} free", head
        (tmp_path / "stop").touch()
        code, out, err = finish(run, 90)
        run = None
        assert code == 0, out + err
    finally:
        (tmp_path / "go").touch()
        (tmp_path / "stop").touch()
        if run is not None:
            finish(run, 90)
        fleet("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
    assert_nothing_left(run_dir)
