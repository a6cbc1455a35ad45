"""Errors a person can act on: each names the field or setting that is wrong."""


class InvalidInput(ValueError):
    """Input that jobsweb refuses before writing anything; `field` names what to fix."""

    def __init__(self, field, message):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
