"""Putting runs in: enqueue and enqueue_many, after= dependencies, batches and chains, and
inline mode (the handler run as it is enqueued)."""
