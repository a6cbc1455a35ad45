"""A length of time in the words every page uses ("45 s", "12 min", "3 h", "2 d").

One unit. Below an hour the words are floored, as clocks are read ("1 min ago" until the second
minute is over), which is off by less than a minute. Hours and days are rounded to the nearest,
as Sidekiq's and Rails' "about 3 hours" are: floored, 2 h 55 min read "2 h", an hour early for a
run due then. A value that rounds up to the next unit carries into it (23 h 40 min is "1 d").
static/local-times.js words the same numbers the same way, so a page whose words the browser
rewrites reads as the server wrote it. Here rather than in web/ so that ops/ (why_waiting's plain
text, for webhooks) can use it too.
"""

# (unit, its length in seconds, rounded to the nearest rather than floored); each unit is used
# below the next one's length.
UNITS = (("s", 1, False), ("min", 60, False), ("h", 3600, True), ("d", 86400, True))


def seconds_words(seconds):
    """`seconds` (its size: the sign is ignored) as '45 s', '12 min', '3 h', '2 d'."""
    seconds = abs(seconds)
    for (unit, size, rounded), (_, next_size, _) in zip(UNITS, UNITS[1:] + ((None, float("inf"), None),)):
        amount = int(seconds / size + (0.5 if rounded else 0))
        if amount * size < next_size:
            return f"{amount} {unit}"


def relative_words(seconds):
    """A moment `seconds` ago (negative: ahead) as '3 min ago' or 'in 3 h'."""
    amount = seconds_words(seconds)
    return f"in {amount}" if seconds < 0 else f"{amount} ago"
