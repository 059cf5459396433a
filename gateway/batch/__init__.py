"""Offline batches: the OpenAI Files and Batches API, run on the fleet in shared-prefix order.

``files`` (file store), ``validate`` (input lines, all checked before any runs), ``objects`` (batch
records, statuses, result lines), ``store`` / ``store_sqlite`` / ``store_redis`` (durable job state,
per-line results exactly once, leases), ``runner`` (a plan's lines within a share of each replica),
``billing`` (a line's answer as a ledger line item), ``service`` (the API's operations and the loop that
runs batches). The plan itself is pure routing code: ``router.batch_plan``. docs/batch.md.
"""
