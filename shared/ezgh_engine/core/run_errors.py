"""Run errors the engine itself ends a run with, named once for every module that may."""

from __future__ import annotations

from ezgh_engine.core.models import RunError

APP_DELETED = RunError("workflows.app_deleted", "AppDeleted", "the run's app was deleted")
