"""Smoke test of an installed headway wheel (run by .ci/packages).

Not a pytest file: .ci/packages runs it with the python of a fresh venv that
holds only the wheel, from a directory outside the checkout, so `import
headway` can only find the installed package. It checks that the extension
loads and that the three things a new user tries first work: a task on the
memory broker, a Bucket and a retry.
"""

import pathlib
import sys

import headway


def main() -> None:
    here = pathlib.Path(headway.__file__).resolve()
    assert "site-packages" in here.parts, f"headway imported from {here}, not from the venv"

    app = headway.App("memory://")

    @app.task(retries=2)
    def add(a: int, b: int) -> int:
        return a + b

    worker = app.worker(concurrency=2)
    worker.start()
    try:
        assert add.delay(2, 3).get(timeout=10) == 5
    finally:
        worker.stop()

    bucket = headway.Bucket(10.0, burst=2.0)
    assert bucket.take() and bucket.take()
    assert not bucket.take(), "a burst of 2 gave a third token at once"

    calls: list[int] = []

    @headway.retry(backoff=headway.Backoff(attempts=3, base=0.001, cap=0.01), on=(ConnectionError,))
    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("not yet")
        return "ok"

    assert flaky() == "ok" and len(calls) == 3, calls
    print(f"smoke ok: headway {headway.__version__} from {here.parent}")


if __name__ == "__main__":
    main()
    sys.exit(0)
