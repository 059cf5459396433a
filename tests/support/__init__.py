"""Helpers shared by the test suites: real servers on loopback, free ports."""
