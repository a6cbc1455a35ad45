"""The admin screen's pages, one blueprint per page group."""

from ..web import has_schedules
from . import auth, dashboard, definitions, enqueue, runs, users, workers


def init_app(app):
    for module in (auth, dashboard, definitions, enqueue, runs, users, workers):
        app.register_blueprint(module.bp)
    if has_schedules():
        from . import definition_form

        app.register_blueprint(definition_form.bp)
    app.add_template_global(has_schedules(), "HAS_DEFINITION_FORM")
