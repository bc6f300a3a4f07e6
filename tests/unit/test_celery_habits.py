"""Celery habits get an error that names errands' spelling (issue 26): calling a chain, ``.delay()``,
``app.enqueue`` of a plain function, two module-level lambdas under one default name."""

from __future__ import annotations

import copy

import pytest

from errands import ConfigurationError, Errands, chain, group


@pytest.fixture
def app(tmp_path):
    return Errands(f"sqlite:///{tmp_path / 'x.db'}")


def add(x: int, y: int) -> int:
    return x + y


FIRST = lambda: 1  # noqa: E731 - module-level lambdas, as a newcomer writes them
SECOND = lambda: 2  # noqa: E731


def test_calling_a_chain_or_a_group_says_how_to_enqueue_it(app):
    job = app.job(add)
    steps = chain(job.prepare(1, 2), job.prepare(3, 4))
    with pytest.raises(TypeError, match=r"only describes jobs; calling it does not enqueue them.*app\.chain\(") as e:
        steps()
    assert "wf.enqueue()" in str(e.value)
    with pytest.raises(AttributeError, match=r"\.delay\(\) does not enqueue them.*app\.chain\("):
        steps.delay()
    with pytest.raises(AttributeError, match=r"\.apply_async\(\) does not enqueue them.*app\.batch\("):
        group(job.prepare(1, 2)).apply_async()
    with pytest.raises(AttributeError, match="has no attribute 'colour'"):
        steps.colour  # noqa: B018 - any other name: the usual error
    assert copy.deepcopy(steps) == steps and hash(steps) == hash(steps)  # still a plain value
    handle = app.chain(steps)  # what the hint says works
    assert len(handle.jobs) == 2
    with pytest.raises(AttributeError, match=r"already stored \(app\.chain\(\.\.\.\) and app\.batch"):
        handle.enqueue()


def test_celery_enqueue_spellings_on_a_job_name_enqueue(app):
    job = app.job(add)
    with pytest.raises(AttributeError, match=r"a job has no \.delay\(\): errands enqueues with job\.enqueue\("):
        job.delay(1, 2)
    with pytest.raises(AttributeError, match=r"job\.using\(delay=\.\.\., queue=\.\.\..*\.enqueue\("):
        job.apply_async((1, 2))
    with pytest.raises(AttributeError, match="has no attribute 'colour'"):
        job.colour  # noqa: B018
    assert job.using(priority=5).name == job.name  # the clone (object.__new__) is unaffected


def test_app_enqueue_of_what_is_not_a_registered_job_is_a_clear_type_error(app):
    job = app.job(add)
    with pytest.raises(TypeError, match=r"only registered jobs can be enqueued \(functions decorated with @app\.job"):
        app.enqueue(lambda: 1)
    with pytest.raises(TypeError, match=rf"plain function add: it is registered as '{job.name}'"):
        app.enqueue(add, [1, 2])
    assert app.enqueue(job.name, [1, 2]).id and app.enqueue(job, [1, 2]).id


def test_two_module_level_lambdas_are_told_to_take_a_name(app):
    app.job(FIRST)
    with pytest.raises(ConfigurationError, match=r"already registered as '.*<lambda>' \(every lambda of a module "
                                                 r"gets that name\): register each one with its own name, "
                                                 r'app\.job\(name="\.\.\."\)'):
        app.job(SECOND)
    assert app.job(name="second")(SECOND).name == "second"
