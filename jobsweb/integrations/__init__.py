"""Optional set-ups built on jobsweb.signals, one line each in a host's app factory: Sentry
(`jobsweb[sentry]`) and OpenTelemetry (`jobsweb[otel]`). Neither is imported by jobsweb itself."""


def outcome(permanent, last_attempt):
    """A failed attempt's jobsweb.outcome tag or attribute: will_retry, dead (its last attempt
    failed) or permanent (a PermanentError or @job(permanent=...): dead at once)."""
    return "permanent" if permanent else "dead" if last_attempt else "will_retry"
