"""after= when the runs waited for end in separate transactions (issue 35): each end counts the
dependent down by one, and only the last one releases it. tests/test_workflows.py's workers end
sibling runs in one FINISH_RUNS, where a release one end too early goes unseen."""

from datetime import datetime, timedelta, timezone

from jobsweb import enqueue
from jobsweb.core.database import db
from jobsweb.engine.runs import run_actions
from jobsweb.testing import drain


def state(sql, run_id):
    return sql("SELECT status, waiting_for FROM job_runs WHERE id = %s", [run_id])[0]


def test_a_run_after_two_stays_waiting_when_one_ends_and_is_queued_only_when_the_other_ends_later(app, sql):
    with app.app_context():
        first = enqueue("test.record")
        second = enqueue("test.record", run_at=datetime.now(timezone.utc) + timedelta(hours=1))
        both_done = enqueue("test.record", after=[first, second])
        assert state(sql, both_done) == ("waiting", 2)

        # drain() claims and finishes one run per transaction (FINISH_RUNS each): the first ends alone.
        assert [(ran.run_id, ran.status) for ran in drain()] == [(first, "succeeded")]
        assert state(sql, both_done) == ("waiting", 1)

        assert run_actions.run_now(second)
        db.session.commit()
        assert [(ran.run_id, ran.status) for ran in drain()] == [(second, "succeeded"), (both_done, "succeeded")]
    [(started,)] = sql("SELECT started_at FROM job_runs WHERE id = %s", [both_done])
    [(second_finished,)] = sql("SELECT finished_at FROM job_runs WHERE id = %s", [second])
    assert started >= second_finished
    assert state(sql, both_done) == ("succeeded", 0)
