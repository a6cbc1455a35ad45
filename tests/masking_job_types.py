"""Job types of the masking tests that a worker process imports (JOBSWEB_HANDLERS)."""

from jobsweb import job


@job("test.mask.failing", max_attempts=2, backoff_base=0.01, backoff_cap=0.01)
def failing(ctx):
    raise RuntimeError(f"could not connect: {ctx.payload['key']}={ctx.payload['value']} host=db")
