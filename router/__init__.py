"""Routing core. Pure: no I/O, no aiohttp; every input is a plain value and so is every output."""
