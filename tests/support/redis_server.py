"""The tests' real redis-server: the same helper the benchmarks use."""

from bench.redis_server import RedisServer, redis_binary

__all__ = ["RedisServer", "redis_binary"]
