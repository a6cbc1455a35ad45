"""The worker: its loop (loop.py) and the parts it is composed of (held runs, claims,
round trips, leases, stop, outages), its connection's wake-ups, and the duties it is handed."""
