import errands


def test_public_api_is_pinned():
    assert sorted(errands.__all__) == [
        "Alert", "Backoff", "BadPayload", "BatchHandle", "BatchRow", "CheckpointTooLarge", "ConfigurationError",
        "Cron", "DeadlineExceeded", "Discard", "EnqueueError", "Errands", "ErrandsError", "FailedJob", "Hooks",
        "Interrupted", "InvalidOption", "InvalidQueueName",
        "JobCancelled", "JobContext", "JobDefinition", "JobExpired", "JobFailed", "JobHandle", "JobNotFound",
        "JobState", "JobTimeout",
        "PayloadNotSerializable", "PayloadTooLarge", "RateLimit", "ResultRow", "Retry", "Schedule", "SchemaError",
        "Snooze", "StepRef", "StepRow", "StoreError", "StoreUnavailable", "UnknownJob", "Workflow", "WorkflowHandle",
        "WorkflowRow", "__version__", "chain", "current_job", "group",
    ]
    for name in errands.__all__:
        assert hasattr(errands, name)


def test_every_error_has_one_root():
    for name in errands.__all__:
        obj = getattr(errands, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, errands.ErrandsError)
