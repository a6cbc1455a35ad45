"""The queue: putting runs in, the worker that runs them, and the operations on runs, over the
run state machine's SQL. Imports only core/; schedules, alerts and retention sit above it and
reach the worker as duties.

Its subpackages, each importing only those before it: jobs/ (job types, queues, signals, retry),
runs/ (a run's status and an operator's actions), worker/ (the loop and its parts), enqueue/
(enqueue, dependencies, batches and chains, inline mode). statements.py and upkeep.py (the SQL
they share) and link.py (the engine's own connection) sit below them all.
"""
