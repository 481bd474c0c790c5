"""fluence-extender with the inspection routes mounted, for end-to-end tests.

Runs the real entry point; the only difference is that ``create_app`` also
serves :func:`scheduler_extender.inspect.inspect_routes` when the app does not
mount them itself yet. ``python -m tests.support.extender`` from the repo root.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette

import scheduler_extender.__main__ as entry
from scheduler_extender.app import create_app
from scheduler_extender.inspect import inspect_routes
from scheduler_extender.scheduling import Scheduler


def create_app_with_inspection(scheduler: Scheduler, **kwargs: Any) -> Starlette:
    app = create_app(scheduler, **kwargs)
    served = {getattr(r, "path", "") for r in app.routes}
    if "/explain" not in served:
        app.router.routes.extend(inspect_routes(scheduler))
    return app


def main() -> None:
    # The entry point calls the factory it imported; point that name at the wrapper.
    setattr(entry, "create_app", create_app_with_inspection)  # noqa: B010
    entry.main()


if __name__ == "__main__":
    main()
