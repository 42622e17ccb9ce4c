"""The demo tables: Pinot's githubEvents example and its pauseless twin (the JSON files in this
folder) and `seed`, which creates them with their topic for `make demo`
(`python manage.py create_demo_table`)."""
