"""The Django project: settings, urls, the Celery app, pages and the REST API."""

from console.celery import app as celery_app

__all__ = ["celery_app"]
