"""The OpenAPI description of the dashboard's JSON API (served at ``/api/openapi.json``).

The operations and their answers come from :data:`errands.dashboard.api.ENDPOINTS`: each 200 answer's
schema is generated from the read model the operation returns (``services.models``), so the document
describes what the API sends.  This module adds what people read: summaries, parameters, bodies."""

from __future__ import annotations

from typing import Any

from .. import __version__
from ..core.limits import ID_MAX, MAX_DELAY
from ..services.models import type_schema
from .api import ENDPOINTS

_ID = {"type": "integer", "minimum": 1, "maximum": ID_MAX}
_ERROR = {"description": "refused", "content": {"application/json": {"schema": {
    "type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}}}}
_FILTERS = [
    {"name": "queue", "in": "query", "schema": {"type": "string", "maxLength": 200}},
    {"name": "state", "in": "query", "schema": {"type": "string", "enum": ["ready", "delayed", "blocked", "running",
                                                                            "stale"]}},
    {"name": "name", "in": "query", "schema": {"type": "string", "maxLength": 200}},
    {"name": "q", "in": "query", "schema": {"type": "string", "maxLength": 200},
     "description": "text in the arguments or the last error"},
    {"name": "before", "in": "query", "schema": _ID, "description": "keyset page: ids below this one"},
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500}},
]
_LIMITED = {"description": "a request limit of the API is used up (enqueue, actions or reads; per user and per "
                           "address): Retry-After says in how many seconds to try again",
            "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}},
            "content": {"application/json": {"schema": {
                "type": "object", "properties": {"error": {"type": "string"}, "retry_after": {"type": "integer"}},
                "required": ["error", "retry_after"]}}}}
_CSRF = {"name": "X-CSRF-Token", "in": "header", "required": True, "schema": {"type": "string"},
         "description": "the csrf value of GET /api/me"}


def _op(summary: str, params: list[dict[str, Any]] | None = None, body: dict[str, Any] | None = None,
        write: bool = False) -> dict[str, Any]:
    """An operation's description; its 200 answer is filled in from the endpoint's model."""
    op: dict[str, Any] = {"summary": summary, "parameters": (params or []) + ([_CSRF] if write else []),
                          "responses": {"400": _ERROR, "401": _ERROR, "403": _ERROR, "404": _ERROR,
                                        "429": _LIMITED}}
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    return op


def openapi_document(root: str = "") -> dict[str, Any]:
    """The document, with ``root`` (the mount's path) as its server."""
    paths = _described() | {"/api/alerts": {"get": _op(
        "The alert thresholds crossed now, and the thresholds this app configures")},
        "/api/workers/{action}": {"post": _worker_command()}}
    schemas: dict[str, Any] = {}
    for endpoint in ENDPOINTS:
        op = paths[endpoint.path][endpoint.method.lower()]
        op["responses"] = {"200": {"description": "ok", "content": {"application/json": {
            "schema": type_schema(endpoint.answer, schemas)}}}, **op["responses"]}
    return {"openapi": "3.0.3", "info": {"title": "errands dashboard API", "version": __version__},
            "servers": [{"url": root or "/"}], "paths": paths,
            "components": {"schemas": dict(sorted(schemas.items())),
                           "securitySchemes": {"session": {"type": "apiKey", "in": "cookie",
                                                           "name": "errands_session"}}},
            "security": [{"session": []}]}


def _worker_command() -> dict[str, Any]:
    op = _op("Quiet (claim nothing more, stay alive), resume or stop (as SIGTERM: finish running jobs and exit) "
             "one worker process or every one of a host; each reads its command with its next heartbeat", [{
                 "name": "action", "in": "path", "required": True,
                 "schema": {"type": "string", "enum": ["quiet", "resume", "stop"]}}], _WORKER_COMMAND, write=True)
    op["responses"]["409"] = {**_ERROR, "description": "the worker is stopping: a stop cannot be taken back"}
    return op


# Request bodies of the write operations (module level: _described stays one screen).
_WORKER_COMMAND: dict[str, Any] = {"type": "object", "description": "either worker or host", "properties": {
    "worker": {"type": "string", "maxLength": 255, "description": "a worker's id (GET /api/workers)"},
    "host": {"type": "string", "maxLength": 255, "description": "every worker process registered on this host"}}}
_SCHEDULE_EDIT: dict[str, Any] = {"type": "object", "properties": {
    "job": {"type": "string", "maxLength": 255, "description": "a registered job"},
    "cron": {"type": "string", "maxLength": 255, "description": "five fields, or six with seconds first"},
    "timezone": {"type": "string", "maxLength": 64, "nullable": True, "description": "IANA name (null: UTC)"},
    "args": {"type": "array", "items": {}}, "kwargs": {"type": "object", "additionalProperties": {}},
    "queue": {"type": "string", "maxLength": 60, "nullable": True},
    "priority": {"type": "integer", "nullable": True},
    "catch_up": {"type": "string", "enum": ["none", "latest", "all"],
                 "description": "slots missed while no scheduler ran: none, the latest (default) or all"},
    "catch_up_limit": {"type": "integer", "minimum": 1, "maximum": 10000, "nullable": True,
                       "description": "with catch_up all: at most this many (default 100)"}}}
_SCHEDULE_ADD: dict[str, Any] = {**_SCHEDULE_EDIT, "required": ["name", "job", "cron"], "properties": {
    "name": {"type": "string", "maxLength": 200, "pattern": "^[A-Za-z0-9_.-]+$"}, **_SCHEDULE_EDIT["properties"]}}
_BULK_DEAD: dict[str, Any] = {"type": "object", "properties": {
    "ids": {"type": "array", "items": _ID, "maxItems": 1000},
    "queue": {"type": "string", "maxLength": 200}, "name": {"type": "string", "maxLength": 200},
    "text": {"type": "string", "maxLength": 200},
    "confirm": {"type": "integer", "minimum": 0, "description": "the count the previous call reported"}}}
_BULK_JOBS: dict[str, Any] = {"type": "object", "required": ["action"], "properties": {
    "action": {"type": "string", "enum": ["cancel", "move", "priority"]},
    "queue": {"type": "string", "maxLength": 200}, "name": {"type": "string", "maxLength": 200},
    "state": {"type": "string", "enum": ["ready", "delayed", "blocked"]},
    "text": {"type": "string", "maxLength": 200},
    "to_queue": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,60}$", "description": "move: the queue"},
    "priority": {"type": "integer", "minimum": -2**31, "maximum": 2**31 - 1, "description": "priority: the value"},
    "confirm": {"type": "integer", "minimum": 0, "description": "the count the first call reported"},
    "upto": {"type": "integer", "minimum": 0, "description": "the upto the first call reported"},
    "since": {"type": "integer", "minimum": 0, "description": "the since the first call reported"}}}
_ENQUEUE_BODY: dict[str, Any] = {"type": "object", "required": ["job"], "properties": {
    "job": {"type": "string"}, "args": {"type": "array"}, "kwargs": {"type": "object"},
    "queue": {"type": "string"}, "delay": {"type": "number", "minimum": 0, "maximum": MAX_DELAY},
    "copies": {"type": "integer", "minimum": 1, "maximum": 100}}}


def _described() -> dict[str, Any]:
    """Summaries, parameters and bodies of every operation."""
    path_name = {"name": "name", "in": "path", "required": True, "schema": {"type": "string", "pattern":
                                                                            "^[A-Za-z0-9._-]{1,60}$"}}
    job_id = {"name": "job_id", "in": "path", "required": True, "schema": _ID}
    schedule = {"name": "name", "in": "path", "required": True, "schema": {"type": "string", "maxLength": 255}}
    workflow_id = {"name": "workflow_id", "in": "path", "required": True, "schema": _ID}
    paths = {
        "/api/me": {"get": _op("The signed-in user and the CSRF token for writes")},
        "/api/overview": {"get": _op("Counters per state and queue, throughput, workers", [
            {"name": "window", "in": "query", "schema": {"type": "string", "enum": ["1h", "24h", "7d"]}}])},
        "/api/jobs": {"get": _op("Jobs waiting or running (keyset pages, counts capped at 10,000)", _FILTERS + [
            {"name": "sort", "in": "query", "schema": {"type": "string", "enum": ["newest", "oldest"]}},
            {"name": "after", "in": "query", "schema": _ID, "description": "keyset page (oldest first): ids above"}])},
        "/api/jobs/{job_id}": {"get": _op("One job wherever it is, with why it waits", [job_id])},
        "/api/jobs/{job_id}/cancel": {"post": _op("Cancel a job", [job_id], write=True)},
        "/api/jobs/bulk": {"post": _op(
            "Cancel, move or re-prioritise the waiting jobs a filter matches (two steps: count, then "
            "confirm with the count, since and upto the first call reported; at most 100,000 a call)",
            body=_BULK_JOBS, write=True)},
        "/api/find": {"get": _op("Where a job id leads (waiting or running, dead letter, kept result); 404 if nowhere",
                                 [{"name": "id", "in": "query", "required": True,
                                   "schema": {"type": "string", "maxLength": 60},
                                   "description": "a job id as people type it: 123, #123 or 1,234"}])},
        "/api/workflows": {"get": _op("Batches, chains and workflows, newest first (keyset pages)", [
            {"name": "before", "in": "query", "schema": _ID, "description": "keyset page: ids below this one"},
            {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500}}])},
        "/api/workflows/{workflow_id}": {"get": _op("A workflow (chain, batch): state, progress and every step",
                                                    [workflow_id])},
        "/api/workflows/{workflow_id}/cancel": {"post": _op(
            "Cancel every step of a workflow that has not started (running steps finish)", [workflow_id],
            write=True)},
        "/api/dead": {"get": _op("The dead letter, with entries grouped by job and error", _FILTERS)},
        "/api/dead/{action}": {"post": _op("Retry or forget dead-letter entries (two steps: count, then confirm)", [
            {"name": "action", "in": "path", "required": True, "schema": {"type": "string",
                                                                          "enum": ["retry", "forget"]}}],
            _BULK_DEAD, write=True)},
        "/api/stale/recover": {"post": _op("Release jobs whose lease expired, now", write=True)},
        "/api/workers": {"get": _op("Worker processes and their heartbeats")},
        "/api/activity": {"get": _op("What each worker runs now, the newest failed attempts and kept outcomes")},
        "/api/queues": {"get": _op("Queues: counts, pause, limits in force")},
        "/api/queues/{name}/limits": {"post": _op(
            "Set a queue's limits, applied by every worker within seconds (null or absent: no such limit)",
            [path_name], {"type": "object", "properties": {
                "concurrency": {"type": "integer", "minimum": 1, "maximum": 100000, "nullable": True},
                "rate": {"type": "string", "maxLength": 40, "nullable": True,
                         "description": "N/unit: 10/minute, 5/s, 100/30s"}}}, write=True)},
        "/api/queues/{name}/{action}": {"post": _op("Pause or resume a queue", [path_name, {
            "name": "action", "in": "path", "required": True, "schema": {"type": "string",
                                                                         "enum": ["pause", "resume"]}}],
            write=True)},
        "/api/periodic": {"get": _op("Schedules (from code and stored): cron, last and next runs"),
                          "post": _op("Store a schedule; every scheduler starts it at its next tick",
                                      body=_SCHEDULE_ADD, write=True)},
        "/api/periodic/{name}/run": {"post": _op("Run a periodic job now", [schedule], write=True)},
        "/api/periodic/{name}/edit": {"post": _op(
            "Change a stored schedule in place (the settings given; its version goes up, every scheduler uses it "
            "from its next tick; a new cron or timezone starts it afresh)", [schedule], _SCHEDULE_EDIT,
            write=True)},
        "/api/periodic/{name}/delete": {"post": _op("Delete a stored schedule", [schedule], write=True)},
        "/api/periodic/{name}/{action}": {"post": _op(
            "Pause or resume a stored schedule (resumed: from its next slot)", [schedule, {
                "name": "action", "in": "path", "required": True,
                "schema": {"type": "string", "enum": ["pause", "resume"]}}], write=True)},
        "/api/enqueue": {"get": _op("Registered jobs the panel may enqueue"),
                         "post": _op("Enqueue a registered job (at most 100 copies)", body=_ENQUEUE_BODY, write=True)},
        "/api/audit": {"get": _op("Who did what, newest first", [{"name": "before", "in": "query",
                                                                   "schema": _ID}])},
        "/api/users": {"get": _op("Dashboard users (admins only)", [{"name": "q", "in": "query",
                                                                     "schema": {"type": "string",
                                                                                "maxLength": 100}}])},
    }
    return paths
