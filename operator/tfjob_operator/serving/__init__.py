"""Serving the operator: `runner` (kopf under leader election, `leader`), `handlers` (kopf registrations
into the controller), `webhook` (the admission webhooks), `addressing` (the addressing the plane
publishes)."""
