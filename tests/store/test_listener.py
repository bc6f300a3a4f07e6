"""The idle wake-up signal of each backend: quiet when nothing happens, prompt after an enqueue."""

import threading
import time

from helpers import scaled

from errands.core.rows import NewJob


def test_listener_wakes_on_enqueue_and_times_out_otherwise(app):
    listener = app.store.listener()
    assert listener is not None
    try:
        started = time.monotonic()
        assert listener.wait(0.2) is False
        assert time.monotonic() - started >= 0.19

        def enqueue_soon():
            time.sleep(0.1)  # on purpose: the wake-up must cut short a wait already under way
            app.store.jobs.enqueue([NewJob("x", "default", "{}")])

        thread = threading.Thread(target=enqueue_soon)
        thread.start()
        started = time.monotonic()
        assert listener.wait(scaled(5)) is True
        assert time.monotonic() - started < scaled(2)
        thread.join()
        app.store.release_thread_connection()
    finally:
        listener.close()


def test_listener_wakes_for_bulk_and_feature_jobs_too(app):
    """Every insert path signals: the plain row, the bulk path (COPY on PostgreSQL from 200 jobs)
    and jobs that use a feature (here a kept result), which take the store's richer insert."""

    @app.job(name="kept", keep_result=True)
    def kept() -> None: ...

    @app.job(name="plain")
    def plain(n: int) -> None: ...

    listener = app.store.listener()
    assert listener is not None
    try:
        for enqueue in (lambda: app.enqueue_many([plain.prepare(i) for i in range(250)]), lambda: kept.enqueue()):
            while listener.wait(0.05):  # drain what earlier statements signalled
                pass
            thread = threading.Thread(target=lambda e=enqueue: (time.sleep(0.1), e()))  # as above, on purpose
            thread.start()
            assert listener.wait(scaled(5)) is True
            thread.join()
        app.store.release_thread_connection()
    finally:
        listener.close()
