"""Prompt-layout advisor: bounded, salted sketches of prompts per (tenant, model), findings priced with
the tenant's own billing rules, and the cost-savings rate per cache layer. Pure: no I/O.

- ``chunking``: content-defined chunks of a rendered prompt and its message layout;
- ``sketch``: one (tenant, model)'s sketch and its price-free ``Snapshot``;
- ``findings``: a snapshot priced into findings;
- ``advisor``: sketches, sampling, windows, the advice document;
- ``savings``: CSR per layer from billing-ledger rows;
- ``render``: the text table and the Prometheus gauge values.

docs/advisor.md describes the design.
"""
