"""The demo table: Pinot's githubEvents example (the JSON files in this folder) and `seed`, which
creates it with its topic for `make demo` (`python manage.py create_demo_table`)."""
