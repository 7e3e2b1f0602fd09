"""Operator commands: listing, retry, cancel, abort, a request's timeline."""
