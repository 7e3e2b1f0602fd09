"""Each backend's own tests, beside the conformance suites every store passes."""
