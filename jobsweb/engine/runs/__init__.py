"""Operations on runs that exist: their status and batches read, an operator's actions
(retry, cancel, delete, run now), waiting for a run, and runs reported from outside."""
