"""``errands metrics``: a standalone Prometheus exporter for errands' tables (and the workers' counters)."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import click

from ..core.config import mask_url
from ..core.extras import require
from .context import Context

log = logging.getLogger("errands.metrics")


class _QuietHandler(WSGIRequestHandler):
    """Scrapes every 15 seconds are not worth a line each on stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, envvar="ERRANDS_METRICS_HOST", show_envvar=True,
              help="Address to listen on; 0.0.0.0 for a Prometheus on another host.")
@click.option("--port", default=9108, show_default=True, type=click.IntRange(0, 65535), envvar="ERRANDS_METRICS_PORT",
              show_envvar=True)
@click.option("--multiproc-dir", envvar="PROMETHEUS_MULTIPROC_DIR", show_envvar=True, default=None,
              type=click.Path(file_okay=False, exists=True),
              help="Also serve the per-run counters worker processes wrote there "
                   "(errands.contrib.prometheus in prometheus_client's multiprocess mode).")
@click.pass_obj
def metrics(ctx: Context, host: str, port: int, multiproc_dir: str | None) -> None:
    """Serve Prometheus metrics read from the database (needs errands[metrics]).

    GET /metrics answers with queue depths by state, the oldest ready job's age, paused queues,
    the last hour's throughput and live workers: the dashboard's figures, one read per scrape.
    """
    make_wsgi_app = require("prometheus_client", "metrics", "errands metrics").make_wsgi_app
    from ..metrics import registry_for

    app = ctx.app(names_database=True)
    app.store.check()  # fail now, with a clear message, if the database is unreachable
    app.close()  # that connection belongs to this thread; the serving thread opens its own
    registry = registry_for(app)
    if multiproc_dir:
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry, path=multiproc_dir)
    # One thread serves every scrape, so the exporter holds one database connection for good.  It is
    # not the main thread: a signal handler that raised inside a request would be swallowed by wsgiref.
    server = make_server(host, port, make_wsgi_app(registry), handler_class=_QuietHandler)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    serving = threading.Thread(target=server.serve_forever, name="errands-metrics", daemon=True)
    serving.start()
    click.echo(f"errands metrics: database {mask_url(app.database_url)}\n"
               f"  http://{host}:{server.server_port}/metrics"
               + (f" (with worker counters from {multiproc_dir})" if multiproc_dir else ""), err=True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        server.shutdown()
        serving.join(timeout=10)
        server.server_close()
