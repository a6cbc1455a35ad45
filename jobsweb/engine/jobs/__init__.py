"""What a job is: job types and the context their handlers get (registry), the queues and
limits they run under (flow), signals, retry backoff and ctx.once."""
