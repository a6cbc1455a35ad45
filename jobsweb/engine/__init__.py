"""The queue: enqueue, the job-type registry, the run state machine's SQL and the worker loop.

Imports only core/. Schedules, alerts and retention sit above it and reach the worker as duties.
"""
