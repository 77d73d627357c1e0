"""Grafana dashboards as code (grafana-foundation-sdk) and their committed JSON.

`dashboards.render.render_all()` returns the JSON documents; `ett dashboards` writes them to
dashboards/json/, where Grafana's provisioning (deploy/grafana/provisioning/) reads them.
"""
