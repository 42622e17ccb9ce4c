"""The console's own JSON API (`/api/v1/`), described by the OpenAPI schema."""

urlpatterns: list = []
