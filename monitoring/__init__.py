"""Health checks, Prometheus metrics (each defined once, here) and chart builders."""
