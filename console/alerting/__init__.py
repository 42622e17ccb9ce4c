"""Alerting: Alertmanager's webhook into the console (`webhook`, `store`) and silences created
from the console through Alertmanager's API v2 (`silences`)."""
