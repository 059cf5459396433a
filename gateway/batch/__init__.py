"""Offline batches: the OpenAI Files and Batches API, run on the fleet in shared-prefix order.

``files`` (file store), ``validate`` (input lines, all checked before any runs), ``objects`` (batch
records, statuses, result lines), ``store`` / ``store_sqlite`` / ``store_redis`` (durable job state,
per-line results exactly once, leases), ``runner`` (a plan's lines within a share of each replica),
``service`` (the API's operations and the loop that runs batches), ``pace`` (the slices in which
validation, planning and settling share the event loop), ``bridge`` (the gateway's pools and
request path as the service's fleet and send), ``metrics`` (the runner's counters at each scrape). The
plan itself is pure routing code: ``router.batch_plan``; a line is billed on the request path
(``gateway.pipeline.billing``, source ``batch``); the HTTP handlers are ``gateway.server.batch_api``.
docs/batch.md.
"""
