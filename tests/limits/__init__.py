"""Flow control: concurrency and rate limits within and across processes."""
