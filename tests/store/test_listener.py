"""The idle wake-up signal of each backend: quiet when nothing happens, prompt after an enqueue."""

import threading
import time

from errands.store.rows import NewJob


def test_listener_wakes_on_enqueue_and_times_out_otherwise(app):
    listener = app.store.listener()
    assert listener is not None
    try:
        started = time.monotonic()
        assert listener.wait(0.2) is False
        assert time.monotonic() - started >= 0.19

        def enqueue_soon():
            time.sleep(0.1)
            app.store.enqueue([NewJob("x", "default", "{}")])

        thread = threading.Thread(target=enqueue_soon)
        thread.start()
        started = time.monotonic()
        assert listener.wait(5) is True
        assert time.monotonic() - started < 2
        thread.join()
        app.store.release_thread_connection()
    finally:
        listener.close()
