"""A job type only a separate worker imports (JOBSWEB_HANDLERS=tests.worker_only_jobs), as in a
standalone set-up where the web process has no JOBSWEB_HANDLERS: the test process never imports
this module (tests/test_worker_job_types.py checks), so its web app knows the type only from the
worker's registration."""

from jobsweb import job


@job("billing.send_invoice")
def send_invoice(ctx):
    return {"sent": ctx.payload["invoice_id"]}
