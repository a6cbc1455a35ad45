"""Operations: alerts and their notifications, retention, metrics, health and dashboard figures.

Imports core/, engine/ and scheduling/. The alert evaluation reaches the worker as a duty.
"""
