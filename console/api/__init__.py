"""REST API: Pinot's controller paths (pinot.py) and, later, the console's own /api/v1/."""
