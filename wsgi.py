import gc

# Nothing made while jobsweb and the app are imported and built is garbage, and collections then
# walked it again and again (a cron tick's CPU, issue 41). They are off until the app is built,
# and what was built is frozen before they are back on, or the first young one would walk it all.
gc.disable()
from jobsweb import create_app  # noqa: E402

app = create_app()
gc.freeze()
gc.enable()
