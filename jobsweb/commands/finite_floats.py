"""A float option that must be a finite number: click's FloatRange lets NaN through (every
comparison with NaN is false, so no bound refuses it), and `--timeout nan` would mean no
timeout at all; without a `max`, infinity passes too."""

import math

import click


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that refuses nan and ±inf (1e400 reads as inf) with a usage error
    naming the option."""

    def convert(self, value, param, ctx):
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)
