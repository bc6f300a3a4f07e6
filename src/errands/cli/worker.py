"""``errands worker``: process jobs until stopped."""

from __future__ import annotations

import click

from ..core.config import mask_url, split_queues
from ..worker.settings import CONCURRENCY, SHUTDOWN_TIMEOUT, SLEEP, WorkerSettings
from ..worker.supervisor import Supervisor
from .context import Context


@click.command()
@click.option("-q", "--queue", "queues", multiple=True, envvar="ERRANDS_QUEUES", show_envvar=True,
              metavar="NAME[,NAME]",
              help="Queues to take jobs from, most important first (repeatable or comma list; "
                   "default: every queue a registered job names).")
@click.option("-c", "--concurrency", default=CONCURRENCY, show_default=True, envvar="ERRANDS_CONCURRENCY",
              show_envvar=True, type=click.IntRange(1, 1000),
              help="Jobs run at once per worker process (threads; async jobs share one event loop).")
@click.option("-p", "--processes", default=1, show_default=True, envvar="ERRANDS_PROCESSES", show_envvar=True,
              type=click.IntRange(1, 256), help="Worker processes under this supervisor.")
@click.option("--max", "max_jobs", type=click.IntRange(1), default=None, envvar="ERRANDS_MAX_JOBS", show_envvar=True,
              help="Exit after this many jobs (per process).")
@click.option("--once", is_flag=True, envvar="ERRANDS_ONCE", show_envvar=True,
              help="Run at most one job, then exit (exits at once if none is ready).")
@click.option("--burst", is_flag=True, envvar="ERRANDS_BURST", show_envvar=True, help="Exit when no job is ready.")
@click.option("--sleep", default=SLEEP, show_default=True, type=click.FloatRange(0.01),
              envvar="ERRANDS_SLEEP", show_envvar=True,
              help="Longest wait in seconds between polls when idle.")
@click.option("--shutdown-timeout", default=SHUTDOWN_TIMEOUT, show_default=True, type=click.FloatRange(0),
              envvar="ERRANDS_SHUTDOWN_TIMEOUT", show_envvar=True,
              help="Seconds running jobs get to finish after SIGTERM.")
@click.option("--lease", type=click.FloatRange(1), default=None, envvar="ERRANDS_LEASE", show_envvar=True,
              help="Seconds a claim is held without a heartbeat (default: the app's, 30).")
@click.option("--prefetch", type=click.IntRange(0, 1000), default=None, envvar="ERRANDS_PREFETCH", show_envvar=True,
              help="Jobs held beyond the running ones (default: adapts to job duration, up to 500).")
@click.option("--no-scheduler", is_flag=True, envvar="ERRANDS_NO_SCHEDULER", show_envvar=True,
              help="Do not enqueue the app's periodic jobs from this worker (another one does).")
@click.pass_obj
def worker(ctx: Context, queues: tuple[str, ...], concurrency: int, processes: int, max_jobs: int | None,
           once: bool, burst: bool, sleep: float, shutdown_timeout: float, lease: float | None,
           prefetch: int | None, no_scheduler: bool) -> None:
    """Claim and run jobs.

    SIGTERM or Ctrl-C: stop claiming, let running jobs finish (up to
    --shutdown-timeout), give the rest back, exit 0.  A second signal gives
    running jobs back at once.  Jobs over their timeout are killed with their
    process, recorded as failed attempts, and the process is replaced.
    """
    app = ctx.app(required=True)
    names = split_queues(queues) or tuple(app.default_queues())
    settings = WorkerSettings(queues=names, concurrency=concurrency, burst=burst or once,
                              max_jobs=1 if once else max_jobs, sleep=sleep, shutdown_timeout=shutdown_timeout,
                              lease=lease, prefetch=0 if once else prefetch, scheduler=not no_scheduler)
    app.store.check()  # fail fast on a missing schema, before forking
    jobs = ", ".join(sorted(app.registry)) or "none"
    click.echo(f"errands worker: database {mask_url(app.database_url)}\n"
               f"  queues: {', '.join(names)} | processes: {processes} x concurrency {concurrency} | "
               f"lease {settings.lease or app.lease:g}s\n  jobs: {jobs}"
               + (f"\n  periodic: {', '.join(sorted(app.schedules))}" if app.schedules and settings.scheduler
                  and not settings.burst else ""), err=True)
    raise SystemExit(Supervisor(app, settings, processes).run())
