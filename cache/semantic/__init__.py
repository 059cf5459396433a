"""The semantic cache layer (issue 17): domain fingerprints, admission rules, event-driven
invalidation, and a guarded embedding mode. See docs/semantic-cache.md; the request path calls
``cache.semantic.layer.SemanticLayer``."""
