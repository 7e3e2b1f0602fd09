"""Flow control: concurrency slots and token buckets held across every process that
shares the store, for workflows and named groups of outside calls."""
