"""The controller's services: resources (schemas, tables), the LLC segment manager, later the
completion protocol, pause/resume, force commit and healing."""
