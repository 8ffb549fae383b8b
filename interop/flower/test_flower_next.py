"""What Flower 2.x drives on a headway worker beyond watching it: its
enable_events broadcast and Shut Down button (commands that ask for no
reply), a revoke shown REVOKED, a terminate from Flower's API, the worker
page and queue lengths (docs/celery.md, "Flower").

Each test names the part of headway's core it exercises; each has its
positive control beside it. Same world as ``test_flower.py``, in a pytest
process of its own (``interop/run_flower.sh``).
"""

import pytest
from world import NODE, World, wait_for

QUIET = "quiet@flower-interop"


@pytest.fixture(scope="module")
def w():
    world = World()
    try:
        yield world
    finally:
        world.close()


def test_flowers_enable_events_broadcast_turns_a_workers_events_on(w):
    # Flower broadcasts `enable_events` every 5 s *without asking for a
    # reply* (Celery's `control.enable_events()`: no `reply_to`, no
    # `ticket`). Exercises: control.rs acting on commands that ask for no
    # reply (it answers none then).
    wait_for(lambda: w.get("/api/workers", status="1").get(NODE) is True, "the -E worker online (control)")
    quiet = w.start_worker(QUIET, events=False)
    try:
        wait_for(lambda: w.get("/api/workers", status="1").get(QUIET) is True,
                 "Flower's enable_events to bring the worker started without -E online", 20)
    finally:
        quiet.stop()


def test_a_task_revoked_before_it_ran_shows_revoked_in_flower(w):
    # Exercises: a `task-revoked` event (terminated false, expired false)
    # when a worker gives up a revoked message — Celery's
    # `Request._announce_revoked`; headway records no run event then.
    doomed = w.capp.send_task("flower.add", (1, 1), countdown=3)
    spared = w.capp.send_task("flower.add", (2, 2), countdown=3)
    w.post(f"/api/task/revoke/{doomed.id}")
    assert w.task_in(spared.id, "SUCCESS")["result"] == "4"
    t = w.task_in(doomed.id, "REVOKED")
    assert t["started"] is None


def test_an_eta_task_is_listed_received_with_its_eta_before_it_runs(w):
    # Exercises: `task-received` sent when the message reaches the consumer
    # (consume.rs), with its eta, as a Celery worker sends it on receipt —
    # not when the run starts.
    later = w.capp.send_task("flower.add", (3, 4), countdown=60)
    t = w.task_in(later.id, "RECEIVED")
    assert t["eta"] and t["started"] is None, t
    # The positive control: a task due now goes on to run.
    now = w.capp.send_task("flower.add", (5, 6))
    assert w.task_in(now.id, "SUCCESS")["received"] is not None
    w.post(f"/api/task/revoke/{later.id}")


def test_terminate_through_flower_stops_a_running_task(w):
    # Flower's `/api/task/revoke/<id>?terminate=true` sends
    # `"terminate": 1` (its strtobool answers 1, not True). Exercises:
    # pidbox.rs reading `terminate` by Python truthiness, and the
    # `task-revoked` event (terminated true) for a terminated run.
    doomed = w.capp.send_task("flower.nap", (120,))
    control = w.capp.send_task("flower.nap", (1.5,))
    w.task_in(doomed.id, "STARTED")
    w.task_in(control.id, "STARTED")
    w.post(f"/api/task/revoke/{doomed.id}", terminate="true")
    wait_for(lambda: w.capp.AsyncResult(doomed.id).state == "REVOKED", "the backend to say REVOKED", 10)
    t = w.task_in(doomed.id, "REVOKED", timeout=10)
    assert t["succeeded"] is None
    c = w.task_in(control.id, "SUCCESS")
    assert c["runtime"] >= 1.5


def test_flowers_worker_page_and_queue_lengths(w):
    # Exercises: `inspect active_queues` (kombu's Queue.as_dict: name,
    # exchange, routing_key, durable, exclusive, auto_delete, no_ack,
    # alias, queue_arguments, binding_arguments, bindings), `active`,
    # `reserved`, `conf`, and `stats.total` ({task name: runs}) — the
    # worker page indexes stats["total"] and iterates the lists.
    w.capp.send_task("flower.add", (1, 2)).get(timeout=30)
    status, body = w.request("GET", f"/worker/{NODE}")
    assert status == 200, body[:500]
    assert "flower.add" in body and "flower.nap" in body
    lengths = w.get("/api/queues/length")
    assert {"name": "celery", "messages": 0} in lengths["active_queues"], lengths


def test_flowers_shutdown_stops_the_worker(w):
    # Flower's `/api/worker/shutdown/<name>` broadcasts `shutdown` without
    # asking for a reply. Exercises: control.rs acting on it (as for
    # enable_events above).
    assert w.get("/api/workers", status="1")[NODE] is True
    assert w.post(f"/api/worker/shutdown/{NODE}") == {"message": "Shutting down!"}
    wait_for(lambda: w.worker.p.poll() is not None, "the worker process to exit", 30)
    assert w.worker.p.returncode == 0
    wait_for(lambda: w.get("/api/workers", status="1").get(NODE) is False, "Flower to show it offline")
