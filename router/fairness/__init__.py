"""Sharing a saturated fleet: pure parts, one concern a file (no I/O, no aiohttp).

    saturation  a replica's free slots (in flight against its slots, its scraped KV usage and engine
                queue, the slots reserved for the top class) and a pool's: saturated when no healthy
                replica has a slot free
    classes     priority classes: the request's header, capped by its tenant's ceiling; batch lines
                are a tenant-less band below every class
    work        a request's predicted work: prefill tokens no replica holds + a decode estimate
    queue       the gateway's queue while a pool is saturated: priority bands, start-time fair queuing
                by predicted work between tenants inside a band, aging past a class's maximum wait,
                preemption (of a queued request, never one that started) when the queue is full
    release     waiters routed while a replica has room (prefix affinity; a waiter whose prefix the
                freed replica holds preferred within a lookahead; reserved slots for the top class)
    ttft        a request's predicted time to first token from the router's model of each replica's
                queue, against its objective

``gateway.process.fair_admission`` drives them on the request path; ``bench.fairness`` in model time.
"""
