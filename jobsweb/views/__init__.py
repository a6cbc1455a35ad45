"""The admin screen's pages, one blueprint per page group."""

from . import auth, dashboard, definition_form, definitions, enqueue, incidents, runs, users, workers


def init_app(app):
    for module in (auth, dashboard, definition_form, definitions, enqueue, incidents, runs, users,
                   workers):
        app.register_blueprint(module.bp)
