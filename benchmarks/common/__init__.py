"""What every benchmark shares: the stores it runs on, statistics, reports, plots, workloads."""
