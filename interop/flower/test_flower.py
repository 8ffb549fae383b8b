"""Flower 2.x sees and drives a headway worker on Celery's Redis layout.

One world for the module (``world.py``): a redis-server, a headway worker
(``headway worker -A flower_hw:app --pool process -E``) and Flower,
all real processes; tasks are sent by a Celery producer (the
``flower_celery`` app Flower runs with) and run by headway. Everything is
asserted through Flower: its HTTP API, and its pages in headless chromium.
The tests run in file order; the last one stops the worker.

Run by ``bash interop/run_flower.sh`` (CI: ``.ci/run``).
"""

import re

import pytest
from world import NODE, World, wait_for

TASKS = {"flower.add", "flower.boom", "flower.nap"}


@pytest.fixture(scope="module")
def w():
    world = World()
    try:
        yield world
    finally:
        world.close()


@pytest.fixture(autouse=True)
def logs_on_failure(w, request):
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(w.logs())


def test_flower_lists_the_headway_worker_with_its_tasks_and_stats(w):
    # worker-online and the heartbeats (every 2 s) make it known and alive.
    wait_for(lambda: w.get("/api/workers", status="1").get(NODE) is True,
             "Flower to see the headway worker online (worker-online / heartbeat)", 45)

    # Flower's inspect (refresh=1: stats, registered, active_queues, conf).
    workers = wait_for(lambda: (got := w.get("/api/workers", refresh="1")).get(NODE, {}).get("registered") and got,
                       "Flower's inspect to answer the worker's registered tasks")
    info = workers[NODE]
    assert TASKS <= set(info["registered"]), info["registered"]
    assert "flower.nope" not in info["registered"]  # the check can fail
    stats = info["stats"]
    assert stats["pid"] == w.worker.p.pid, (stats, w.worker.p.pid)
    assert stats["broker"]["transport"] == "redis"
    assert "127.0.0.1" in stats["broker"]["hostname"]

    # The workers table's data (what the page's table shows): online, with
    # its heartbeats and load.
    rows = w.get("/workers", json="1")["data"]
    row = next(r for r in rows if r["hostname"] == NODE)
    assert row["status"] is True
    assert row["sw_ident"] == "headway"
    assert row["heartbeats"], row
    assert len(row["loadavg"]) == 3


def test_tasks_a_celery_producer_sent_show_in_flower_with_their_states(w):
    ok = w.capp.send_task("flower.add", (2, 3))
    bad = w.capp.send_task("flower.boom", ("no such invoice",))
    # The result backend says headway ran them (Celery's AsyncResult).
    assert ok.get(timeout=30) == 5
    with pytest.raises(Exception, match="no such invoice") as err:
        bad.get(timeout=30)
    assert type(err.value).__name__ == "ValueError"

    t = w.task_in(ok.id, "SUCCESS")
    assert t["name"] == "flower.add"
    assert t["worker"] == NODE
    assert t["result"] == "5"
    assert isinstance(t["runtime"], float) and t["runtime"] >= 0
    assert t["received"] and t["started"] and t["succeeded"]
    assert t["received"] <= t["started"] <= t["succeeded"]
    assert "2" in t["args"] and "3" in t["args"]
    assert t["exception"] is None

    f = w.task_in(bad.id, "FAILURE")
    assert f["name"] == "flower.boom"
    assert f["worker"] == NODE
    assert "ValueError" in f["exception"] and "no such invoice" in f["exception"], f["exception"]
    assert f["traceback"], f
    assert f["result"] is None

    # /api/tasks filters: by state and by name, each with its control.
    failures = w.get("/api/tasks", state="FAILURE")
    assert bad.id in failures and ok.id not in failures
    successes = w.get("/api/tasks", state="SUCCESS")
    assert ok.id in successes and bad.id not in successes
    adds = w.get("/api/tasks", taskname="flower.add", workername=NODE)
    assert ok.id in adds and bad.id not in adds
    assert {"flower.add", "flower.boom"} <= set(w.get("/api/task/types")["task-types"])

    # Flower's result API reads headway's result in Celery's backend.
    assert w.get(f"/api/task/result/{ok.id}") == {"task-id": ok.id, "state": "SUCCESS", "result": 5}


def test_a_task_revoked_through_flower_never_runs_and_is_revoked(w):
    # Two etas 4 s out, held by the headway worker until due; Flower's
    # revoke API names one of them at once, well before it is due.
    doomed = w.capp.send_task("flower.add", (1, 1), countdown=4)
    spared = w.capp.send_task("flower.add", (2, 2), countdown=4)
    assert w.post(f"/api/task/revoke/{doomed.id}") == {"message": f"Revoked '{doomed.id}'"}

    # Positive control first: the eta nobody revoked comes due and runs.
    assert spared.get(timeout=30) == 4
    assert w.task_in(spared.id, "SUCCESS")["result"] == "4"
    # The revoked one, due at the same moment, is REVOKED in the result
    # backend, as Flower's result API reads it, and never ran: no
    # task-started for it reached Flower.
    wait_for(lambda: w.get(f"/api/task/result/{doomed.id}")["state"] == "REVOKED",
             "Flower's result API to answer REVOKED", 10)
    assert w.capp.AsyncResult(doomed.id).state == "REVOKED"
    assert doomed.id not in w.get("/api/tasks", state="STARTED")
    assert doomed.id not in w.get("/api/tasks", state="SUCCESS")
    assert spared.id in w.get("/api/tasks", state="SUCCESS")


def test_a_task_sent_through_flowers_api_runs_on_the_headway_worker(w):
    sent = w.post("/api/task/send-task/flower.add", {"args": [20, 22]})
    # With `timeout` Flower reads the state before it waits for the result
    # (its read_result), so that answer's state may still be PENDING; the
    # result is the run's. Asked again, the state is the stored one.
    got = w.get(f"/api/task/result/{sent['task-id']}", timeout="20")
    assert got["result"] == 42 and got["state"] in ("PENDING", "SUCCESS"), got
    got = w.get(f"/api/task/result/{sent['task-id']}")
    assert got == {"task-id": sent["task-id"], "state": "SUCCESS", "result": 42}, got
    assert w.task_in(sent["task-id"], "SUCCESS")["worker"] == NODE
    # Its control: the same task sent with arguments its body refuses fails
    # on the worker, and Flower says why.
    bad = w.post("/api/task/send-task/flower.add", {"args": [20]})
    f = w.task_in(bad["task-id"], "FAILURE")
    assert "TypeError" in f["exception"], f["exception"]


def test_flower_pages_render_the_headway_worker_and_its_tasks(w):
    # The pages fill their tables by XHR after load: each is loaded until
    # its rows are there (chromium's virtual time budget lets them run).
    row = f'aria-label="Worker {NODE}"'
    workers_page = wait_for(lambda: (d := w.chromium("/workers")) and row in d and d,
                            "the workers page to list the headway worker", 90, every=1)
    assert re.search(r"<title>[^<]*Flower", workers_page), workers_page[:500]
    assert ">Online<" in workers_page, workers_page[-3000:]

    tasks_page = wait_for(lambda: (d := w.chromium("/tasks")) and "flower.boom" in d and d,
                          "the tasks page to list the tasks", 90, every=1)
    for text in ("flower.add", "flower.boom", NODE, "SUCCESS", "FAILURE"):
        assert text in tasks_page, (text, tasks_page[-3000:])
    # Positive control for "present": a name never sent is not on the page.
    assert "flower.never_sent" not in tasks_page


def test_a_stopped_worker_shows_offline_in_flower(w):
    assert w.get("/api/workers", status="1")[NODE] is True
    assert w.worker.alive()
    # SIGTERM: headway's warm shutdown; its last event is worker-offline.
    w.worker.stop()
    assert w.worker.p.returncode == 0, w.worker.text()
    assert "stopped after settling" in w.worker.text()
    wait_for(lambda: w.get("/api/workers", status="1").get(NODE) is False,
             "Flower to show the worker offline (worker-offline)")
