"""Operator commands: retry, cancel, resume, abort, collection and a request's timeline."""
