"""Segment builds on Spark and the deep store. No Django imports: the Spark job runs anywhere."""
